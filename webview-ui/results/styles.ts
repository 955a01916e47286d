/**
 * The Tuning Results page's own styles, after the base both chart pages share (chartPage.ts's
 * `chartPageCss`; adopted with it as a constructable style sheet). Every colour is a `--vscode-*`
 * variable (fallbacks are only `transparent` / `inherit`).
 */

export const resultsCss = `
.best-summary { flex-basis: 100%; display: flex; flex-wrap: wrap; align-items: center; gap: 8px 12px; margin-top: 4px; }
.best-summary .best-text { font-family: var(--vscode-editor-font-family); }
figcaption { display: flex; align-items: center; gap: 6px; }
select {
  color: var(--vscode-dropdown-foreground, inherit);
  background: var(--vscode-dropdown-background, transparent);
  border: 1px solid var(--vscode-dropdown-border, var(--vscode-widget-border, transparent));
  font: inherit;
  padding: 1px 4px;
}
select:focus { outline: 1px solid var(--vscode-focusBorder); outline-offset: -1px; }
.chart { min-height: 240px; }
.stop-marker {
  position: absolute;
  width: 9px;
  height: 9px;
  margin: -5px 0 0 -5px;
  transform: rotate(45deg);
  background: var(--vscode-charts-orange);
  border: 1px solid var(--vscode-editor-background, transparent);
  pointer-events: auto;
  cursor: default;
}
.stop-marker.selected { outline: 2px solid var(--vscode-focusBorder); }
table.trials { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.trials th, table.trials td { text-align: left; padding: 3px 10px 3px 6px; border-bottom: 1px solid var(--vscode-panel-border, transparent); white-space: nowrap; }
table.trials td.num, table.trials th.num { text-align: right; }
table.trials th { font-weight: 600; }
table.trials th button {
  all: unset;
  cursor: pointer;
  color: var(--vscode-foreground);
}
table.trials th button:focus-visible { outline: 1px solid var(--vscode-focusBorder); }
table.trials th[aria-sort="ascending"] button::after { content: ' ▲'; color: var(--vscode-descriptionForeground); }
table.trials th[aria-sort="descending"] button::after { content: ' ▼'; color: var(--vscode-descriptionForeground); }
table.trials tbody tr { cursor: default; }
table.trials tbody tr:hover { background: var(--vscode-list-hoverBackground, transparent); }
table.trials tbody tr.selected { background: var(--vscode-list-inactiveSelectionBackground, transparent); }
table.trials tbody tr:focus { outline: 1px solid var(--vscode-focusBorder); outline-offset: -1px; }
table.trials tbody tr.best td:first-child { box-shadow: inset 3px 0 0 var(--vscode-charts-green); }
.badge {
  display: inline-block;
  margin-left: 6px;
  padding: 0 6px;
  border-radius: 8px;
  font-size: 0.85em;
  color: var(--vscode-badge-foreground);
  background: var(--vscode-badge-background);
}
.status-failed { color: var(--vscode-errorForeground); }
.status-stopped { color: var(--vscode-charts-orange); }
.status-running { color: var(--vscode-charts-blue); }
.status-interrupted, .status-pending { color: var(--vscode-descriptionForeground); }
body.vscode-high-contrast table.trials th, body.vscode-high-contrast table.trials td { border-bottom-color: var(--vscode-contrastBorder, transparent); }
body.vscode-high-contrast table.trials tbody tr.selected { outline: 1px dotted var(--vscode-contrastActiveBorder, transparent); }
`;
