/**
 * The Curves page's styles, adopted as a constructable style sheet (as the Tuning Results page's:
 * CSP governs <style>, not adoptedStyleSheets). Every colour is a `--vscode-*` variable.
 */
import { tooltipCss } from '../chartTooltip';
import { runColourVars } from './chart';

const css = `
body {
  color: var(--vscode-foreground);
  font-family: var(--vscode-font-family);
  font-size: var(--vscode-font-size);
  padding: 0 20px 20px;
}
.waiting, .empty, .state { color: var(--vscode-descriptionForeground); }
header.summary { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px; padding: 12px 0 8px; border-bottom: 1px solid var(--vscode-panel-border, transparent); }
header.summary h1 { font-size: 1.4em; font-weight: 600; margin: 0; }
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
a.log-link { color: var(--vscode-textLink-foreground); text-decoration: none; font-size: 0.9em; }
a.log-link:hover, a.log-link:focus { color: var(--vscode-textLink-activeForeground, var(--vscode-textLink-foreground)); text-decoration: underline; }
.run-status, .run-note { color: var(--vscode-descriptionForeground); }
.run-status.status-failed, .run-status.status-interrupted { color: var(--vscode-errorForeground); }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 16px; margin: 16px 0; }
figure { margin: 0; min-width: 0; }
figcaption { color: var(--vscode-descriptionForeground); margin-bottom: 6px; }
.chart { position: relative; min-height: 220px; }
body.vscode-high-contrast .legend-entry { border-color: var(--vscode-contrastBorder, transparent); }
body.vscode-high-contrast .legend-entry[aria-pressed="true"] { outline: 1px dotted var(--vscode-contrastActiveBorder, transparent); }
${tooltipCss}
`;

export function adoptStyles(): void {
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(css);
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
}
