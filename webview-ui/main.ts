// The GPU panel's page. Imports only the web components it uses, to keep the bundle lean.
import '@vscode-elements/elements/dist/vscode-badge/index.js';
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-collapsible/index.js';
import '@vscode-elements/elements/dist/vscode-progress-ring/index.js';
import { asHostMessage, Panel } from './panel';

const api = acquireVsCodeApi();
const root = document.getElementById('app') ?? document.body.appendChild(document.createElement('main'));
const timeout = Number(document.body.dataset.firstSampleTimeoutMs);
const panel = new Panel(root, api, Number.isFinite(timeout) && timeout > 0 ? timeout : 15_000);

window.addEventListener('message', (event: MessageEvent<unknown>) => {
  const message = asHostMessage(event.data);
  if (message) panel.handle(message);
});

// The ready handshake: the host posts nothing until it hears this, so no message is lost
// while the page loads (or while the view is hidden and its page torn down).
api.postMessage({ type: 'panel/ready' });
