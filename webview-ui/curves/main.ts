// The Curves page (a webview panel in an editor tab): the metrics of one or several runs of the Runs view.
import type { CurvesApi } from './page';
import { CurvesPage } from './page';
import { adoptStyles } from './styles';
import { onThemeChange } from '../theme';

declare function acquireVsCodeApi(): CurvesApi;

adoptStyles();
const api = acquireVsCodeApi();
const root = document.getElementById('app') ?? document.body.appendChild(document.createElement('main'));
const page = new CurvesPage(root, api);

window.addEventListener('message', (event: MessageEvent<unknown>) => page.onWindowMessage(event.data));
onThemeChange(() => page.themeChanged());

// The ready handshake: the host posts nothing until it hears this.
api.postMessage({ type: 'curves/ready' });
