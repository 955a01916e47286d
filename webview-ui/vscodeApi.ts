import type { PanelToHostMessage } from '../src/common/protocol';

/** What the panel remembers across hide/show and reloads (VS Code keeps it for us). */
export interface PanelState {
  /** Keys (uuid, or `#<index>`) of the device cards the user collapsed. */
  readonly collapsed: readonly string[];
}

/** The part of VS Code's webview API the panel uses. */
export interface VsCodeApi {
  postMessage(message: PanelToHostMessage): void;
  getState(): PanelState | undefined;
  setState(state: PanelState): PanelState;
}

declare global {
  /** Injected by VS Code into every webview; may be called once per page. */
  function acquireVsCodeApi(): VsCodeApi;
}
