/**
 * What the two editor-tab pages with line charts share, the Curves page (curves/) and the Tuning
 * Results page (results/): their base styles, their start (styles, the VS Code API, the page on
 * `#app`, host messages, theme changes, the ready handshake), and how their uPlot charts are set
 * up (frame, axes, lines aligned on one x).
 */
import type uPlot from 'uplot';
import { tooltipCss } from './chartTooltip';
import { chartFrame, onThemeChange, type ChartColors } from './theme';

/**
 * The styles both pages start from; each adds its own after them. Every colour is a `--vscode-*`
 * variable (fallbacks are only `transparent` / `inherit`).
 */
export const chartPageCss = `
body {
  color: var(--vscode-foreground);
  font-family: var(--vscode-font-family);
  font-size: var(--vscode-font-size);
  padding: 0 20px 20px;
}
.waiting, .empty, .state { color: var(--vscode-descriptionForeground); }
header.summary { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px; padding: 12px 0 8px; border-bottom: 1px solid var(--vscode-panel-border, transparent); }
header.summary h1 { font-size: 1.4em; font-weight: 600; margin: 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 16px; margin: 16px 0; }
figure { margin: 0; min-width: 0; }
figcaption { color: var(--vscode-descriptionForeground); margin-bottom: 6px; }
.chart { position: relative; }
a.log-link { color: var(--vscode-textLink-foreground); text-decoration: none; }
a.log-link:hover, a.log-link:focus { color: var(--vscode-textLink-activeForeground, var(--vscode-textLink-foreground)); text-decoration: underline; }
${tooltipCss}
`;

/**
 * Adopts `chartPageCss` and then `css` as one constructable style sheet: CSP governs <style> and
 * style attributes, not `document.adoptedStyleSheets`, so the pages need no 'unsafe-inline'.
 */
export function adoptChartPageStyles(css: string): void {
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(chartPageCss + css);
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
}

/** What `startChartPage` drives. */
export interface ChartPage {
  /** A `message` event's data (the page lets only well-formed host messages through). */
  onWindowMessage(data: unknown): void;
  /** The theme changed: the charts take its colours again. */
  themeChanged(): void;
}

/** Injected by VS Code into every webview; may be called once per page. Each page says what it gets. */
declare function acquireVsCodeApi(): unknown;

/**
 * Starts a page: adopts its styles, makes it on `#app` with the VS Code API, hands it the host's
 * messages and theme changes, and then posts `ready`: the host posts nothing until it hears that.
 */
export function startChartPage<Api extends { postMessage(message: Ready): void }, Ready>(page: {
  readonly css: string;
  readonly ready: Ready;
  readonly create: (root: HTMLElement, api: Api) => ChartPage;
}): void {
  adoptChartPageStyles(page.css);
  const api = acquireVsCodeApi() as Api;
  const root = document.getElementById('app') ?? document.body.appendChild(document.createElement('main'));
  const shown = page.create(root, api);
  window.addEventListener('message', (event: MessageEvent<unknown>) => shown.onWindowMessage(event.data));
  onThemeChange(() => shown.themeChanged());
  api.postMessage(page.ready);
}

/**
 * The options every chart of these pages starts from: its size, no legend (the pages have their
 * own), no drag-to-zoom or selection, an x scale of numbers (not time); and its axes' look.
 */
export function chartBase(c: ChartColors, width: number, height: number): {
  readonly axis: uPlot.Axis;
  readonly options: Pick<uPlot.Options, 'width' | 'height' | 'legend' | 'cursor' | 'select' | 'scales'>;
} {
  const frame = chartFrame(c);
  return { axis: frame.axis, options: { width, height, ...frame.options, scales: { x: { time: false } } } };
}

/**
 * Lines of (x, y) points as uPlot wants them: one x array (every line's x, ascending, once) and
 * a y array per line, null where that line has no point at that x.
 */
export function alignLines(lines: ReadonlyArray<ReadonlyArray<readonly [number, number]>>): uPlot.AlignedData {
  const xs = [...new Set(lines.flatMap((points) => points.map(([x]) => x)))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = lines.map((points) => {
    const col = new Array<number | null>(xs.length).fill(null);
    for (const [x, y] of points) col[index.get(x) as number] = y;
    return col;
  });
  return [xs, ...ys] as uPlot.AlignedData;
}
