import type uPlot from 'uplot';
/** Colours for the canvas (uPlot cannot use CSS variables, so we read them from the theme). */
export interface ChartColors {
  readonly line: string;
  /** The training loss curve: another chart colour than memory's, so the two never read as one. */
  readonly loss: string;
  readonly fill: string;
  readonly axis: string;
  readonly grid: string;
  readonly font: string;
}

/** A theme variable's value (on <html>, else <body>), `fallback` where it has none. */
export function cssVar(name: string, fallback: string): string {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim()
    || getComputedStyle(document.body).getPropertyValue(name).trim();
  return v || fallback;
}

/** `#rrggbb` -> `#rrggbb33`; any other colour syntax is returned as a translucent-free stroke. */
function translucent(color: string, alphaHex: string): string {
  return /^#[0-9a-f]{6}$/i.test(color) ? color + alphaHex : /^#[0-9a-f]{3}$/i.test(color) ? color.replace(/^#(.)(.)(.)$/, '#$1$1$2$2$3$3') + alphaHex : 'transparent';
}

export function readChartColors(): ChartColors {
  const line = cssVar('--vscode-charts-blue', 'currentColor');
  const family = cssVar('--vscode-font-family', 'sans-serif');
  return {
    line,
    loss: cssVar('--vscode-charts-orange', line),
    fill: translucent(line, '33'),
    axis: cssVar('--vscode-descriptionForeground', cssVar('--vscode-foreground', 'gray')),
    grid: cssVar('--vscode-charts-lines', 'rgba(128,128,128,0.3)'),
    font: `11px ${family}`,
  };
}

/**
 * VS Code switches themes by changing the body's class (`vscode-dark`, `vscode-light`,
 * `vscode-high-contrast`) and the `--vscode-*` variables on <html>; call back when either changes.
 */
export function onThemeChange(callback: () => void): void {
  let last = '';
  const check = (): void => {
    const key = `${document.body.className}|${document.documentElement.getAttribute('style') ?? ''}`;
    if (key !== last) {
      const first = last === '';
      last = key;
      if (!first) callback();
    }
  };
  check();
  const observer = new MutationObserver(check);
  observer.observe(document.body, { attributes: true, attributeFilter: ['class'] });
  observer.observe(document.documentElement, { attributes: true, attributeFilter: ['style'] });
}

/**
 * What every small chart of the panel shares: no legend, no drag-to-zoom or selection (the
 * sidebar is too narrow for them), and axes drawn in the theme's colours.
 */
export function chartFrame(c: ChartColors): { readonly axis: uPlot.Axis; readonly options: Pick<uPlot.Options, 'legend' | 'cursor' | 'select'> } {
  return {
    axis: { stroke: c.axis, font: c.font, grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.grid, width: 1, size: 4 } },
    options: {
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      select: { show: false, left: 0, top: 0, width: 0, height: 0 },
    },
  };
}
