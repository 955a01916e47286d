// The Curves page (a webview panel in an editor tab): the metrics of one or several runs of the Runs view.
import { startChartPage } from '../chartPage';
import { CurvesPage, type CurvesApi } from './page';
import { curvesCss } from './styles';

startChartPage({ css: curvesCss, ready: { type: 'curves/ready' }, create: (root, api: CurvesApi) => new CurvesPage(root, api) });
