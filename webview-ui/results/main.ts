// The "Tuning Results" page (a webview panel in an editor tab). Imports only the web components it uses.
import '@vscode-elements/elements/dist/vscode-button/index.js';
import { startChartPage } from '../chartPage';
import { ResultsPage, type ResultsApi } from './page';
import { resultsCss } from './styles';

startChartPage({ css: resultsCss, ready: { type: 'results/ready' }, create: (root, api: ResultsApi) => new ResultsPage(root, api) });
