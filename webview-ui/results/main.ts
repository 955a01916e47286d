// The "Tuning Results" page (a webview panel in an editor tab). Imports only the web components it uses.
import '@vscode-elements/elements/dist/vscode-button/index.js';
import type { ResultsApi } from './page';
import { ResultsPage } from './page';
import { adoptStyles } from './styles';
import { onThemeChange } from '../theme';

declare function acquireVsCodeApi(): ResultsApi;

adoptStyles();
const api = acquireVsCodeApi();
const root = document.getElementById('app') ?? document.body.appendChild(document.createElement('main'));
const page = new ResultsPage(root, api);

window.addEventListener('message', (event: MessageEvent<unknown>) => page.onWindowMessage(event.data));
onThemeChange(() => page.themeChanged());

// The ready handshake: the host posts nothing until it hears this.
api.postMessage({ type: 'results/ready' });
