/** The styles of LineFocus's tooltip (lineFocus.ts), for every page with line charts. */
export const tooltipCss = `
.chart-tooltip {
  position: absolute;
  z-index: 10;
  pointer-events: none;
  white-space: nowrap;
  padding: 2px 6px;
  font-size: 0.9em;
  color: var(--vscode-editorHoverWidget-foreground, var(--vscode-foreground));
  background: var(--vscode-editorHoverWidget-background, var(--vscode-editor-background));
  border: 1px solid var(--vscode-editorHoverWidget-border, var(--vscode-widget-border, transparent));
}
.chart-tooltip[hidden] { display: none; }
.chart .u-over { cursor: pointer; }
`;
