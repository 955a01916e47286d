/**
 * The Curves page's own styles, after the base both chart pages share (chartPage.ts's
 * `chartPageCss`; adopted with it as a constructable style sheet). Every colour is a `--vscode-*` variable.
 */
import { runColourVars } from './chart';

export const curvesCss = `
.legend { display: flex; flex-wrap: wrap; gap: 6px 10px; margin: 12px 0 4px; }
.legend-entry {
  all: unset;
  display: inline-flex;
  align-items: center;
  gap: 6px;
  padding: 2px 8px;
  cursor: pointer;
  border: 1px solid var(--vscode-widget-border, transparent);
  border-radius: 3px;
}
.legend-entry:hover { background: var(--vscode-list-hoverBackground, transparent); }
.legend-entry:focus-visible { outline: 1px solid var(--vscode-focusBorder); outline-offset: 1px; }
.legend-entry[aria-pressed="true"] { border-color: var(--vscode-focusBorder); background: var(--vscode-list-inactiveSelectionBackground, transparent); }
.legend-entry.dimmed { opacity: 0.55; }
.swatch { display: inline-block; width: 18px; height: 0; border-top: 3px solid var(--vscode-charts-blue); }
.swatch.dashed { border-top-style: dashed; }
${runColourVars.map((v, i) => `.swatch.colour-${i} { border-top-color: var(${v}); }`).join('\n')}
.legend-item { display: inline-flex; align-items: center; gap: 4px; }
a.log-link { font-size: 0.9em; }
.run-status, .run-note { color: var(--vscode-descriptionForeground); }
.run-status.status-failed, .run-status.status-interrupted { color: var(--vscode-errorForeground); }
.chart { min-height: 220px; }
body.vscode-high-contrast .legend-entry { border-color: var(--vscode-contrastBorder, transparent); }
body.vscode-high-contrast .legend-entry[aria-pressed="true"] { outline: 1px dotted var(--vscode-contrastActiveBorder, transparent); }
`;
