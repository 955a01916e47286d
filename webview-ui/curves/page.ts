import { asCurvesHostMessage, type CurvesMetric, type CurvesRun, type CurvesToHostMessage, type HostToCurvesMessage } from '../../src/common/curvesProtocol';
import { MetricChart, readRunPalette, runColourVars } from './chart';

/** What the page remembers across hide/show and reloads (VS Code keeps it for us). */
export interface CurvesState {
  /** The run highlighted (the others dimmed), in every chart and the legend. */
  readonly highlighted: string | null;
  /** The runs shown (from the host's markup), for the panel to come back after a window reload. */
  readonly runIds: readonly string[];
}

/** The part of VS Code's webview API the page uses. */
export interface CurvesApi {
  postMessage(message: CurvesToHostMessage): void;
  getState(): CurvesState | undefined;
  setState(state: CurvesState): CurvesState;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className = '', text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * The Curves page: a legend of the runs (a button each: its colour, name and status; a click, or
 * Enter / Space on it, highlights the run in every chart, again clears it), then one chart per
 * metric. Each `curves/data` replaces what it shows; the charts keep their plots where only points
 * were added.
 */
export class CurvesPage {
  private runs: readonly CurvesRun[] = [];
  private metrics: readonly CurvesMetric[] = [];
  private live = false;
  private state: CurvesState;
  private readonly charts = new Map<string, { figure: HTMLElement; caption: HTMLElement; chart: MetricChart }>();
  private built: { header: HTMLElement; legend: HTMLElement; charts: HTMLElement; empty: HTMLElement } | undefined;

  constructor(private readonly root: HTMLElement, private readonly api: CurvesApi) {
    const saved = api.getState();
    const ids = (root.dataset.runIds ?? '').split('\n').filter(Boolean);
    this.state = { highlighted: saved?.highlighted ?? null, runIds: ids.length ? ids : saved?.runIds ?? [] };
    api.setState(this.state);
    document.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape' && this.state.highlighted !== null) this.pick(null);
    });
  }

  handle(message: HostToCurvesMessage): void {
    this.runs = message.runs;
    this.metrics = message.metrics;
    this.live = message.live;
    this.render();
  }

  onWindowMessage(data: unknown): void {
    const m = asCurvesHostMessage(data);
    if (m) this.handle(m);
  }

  themeChanged(): void {
    const p = readRunPalette();
    for (const c of this.charts.values()) c.chart.setPalette(p);
  }

  /** Highlights a run (null: none) everywhere; picking the highlighted one again clears it. */
  private pick(runId: string | null): void {
    const highlighted = runId !== null && runId === this.state.highlighted ? null : runId;
    this.state = { ...this.state, highlighted };
    this.api.setState(this.state);
    this.renderLegend();
    for (const c of this.charts.values()) c.chart.highlight(highlighted);
  }

  private build(): NonNullable<CurvesPage['built']> {
    this.root.replaceChildren();
    const header = el('header', 'summary');
    const legend = el('div', 'legend');
    legend.setAttribute('role', 'group');
    legend.setAttribute('aria-label', 'Runs: press one to highlight its lines');
    const charts = el('section', 'charts');
    const empty = el('p', 'empty');
    this.root.append(header, legend, empty, charts);
    return { header, legend, charts, empty };
  }

  private render(): void {
    this.built ??= this.build();
    const b = this.built;
    // A run gone from the data (deleted) cannot stay highlighted.
    if (this.state.highlighted !== null && !this.runs.some((r) => r.id === this.state.highlighted)) {
      this.state = { ...this.state, highlighted: null };
      this.api.setState(this.state);
    }
    const n = this.runs.length;
    b.header.replaceChildren(
      el('h1', '', n === 1 ? `Curves: ${this.runs[0].label}` : `Curves: ${n} runs`),
      el('span', 'state', this.live ? 'Following the running run: the charts grow as its record does.' : 'From the runs\' records.'),
    );
    this.renderLegend();
    b.empty.textContent = this.metrics.length ? '' : n === 1 ? 'This run has recorded no metrics per step or epoch yet.' : 'These runs have recorded no metrics per step or epoch yet.';
    b.empty.hidden = this.metrics.length > 0;

    const palette = readRunPalette();
    const keys = new Set(this.metrics.map((m) => m.key));
    for (const [key, c] of this.charts) {
      if (keys.has(key)) continue;
      c.chart.dispose();
      c.figure.remove();
      this.charts.delete(key);
    }
    for (const m of this.metrics) {
      let c = this.charts.get(m.key);
      if (!c) {
        const figure = el('figure');
        const caption = el('figcaption');
        const host = el('div');
        figure.append(caption, host);
        const chart = new MetricChart(host, palette, (runId) => this.pick(runId));
        chart.highlight(this.state.highlighted);
        c = { figure, caption, chart };
        this.charts.set(m.key, c);
      }
      c.caption.textContent = m.title;
      // In the data's order, which may change as a run reports a new metric.
      b.charts.append(c.figure);
      c.chart.update(m, this.runs);
    }
  }

  private renderLegend(): void {
    const legend = this.built?.legend;
    if (!legend) return;
    const focused = (document.activeElement as HTMLElement | null)?.dataset?.runId;
    legend.replaceChildren(...this.runs.map((r) => {
      const on = this.state.highlighted === r.id;
      const button = el('button', `legend-entry${this.state.highlighted !== null && !on ? ' dimmed' : ''}`);
      button.type = 'button';
      button.dataset.runId = r.id;
      button.setAttribute('aria-pressed', String(on));
      const swatch = el('span', `swatch colour-${r.colour % runColourVars.length}${r.colour >= runColourVars.length ? ' dashed' : ''}`);
      swatch.setAttribute('aria-hidden', 'true');
      button.append(swatch, el('span', 'run-label', r.label), el('span', `run-status status-${r.status}`, r.status));
      if (r.note) button.append(el('span', 'run-note', r.note));
      button.title = on ? `Show every run alike (${r.label} is highlighted)` : `Highlight ${r.label} in every chart`;
      button.addEventListener('click', () => this.pick(r.id));
      const logLink = el('a', 'log-link', 'log');
      logLink.href = '#';
      logLink.title = `Open the log of ${r.label} in an editor`;
      logLink.addEventListener('click', (ev) => {
        ev.preventDefault();
        this.api.postMessage({ type: 'curves/openLog', runId: r.id });
      });
      const item = el('span', 'legend-item');
      item.append(button, logLink);
      return item;
    }));
    if (focused) legend.querySelector<HTMLElement>(`[data-run-id="${CSS.escape(focused)}"]`)?.focus();
  }
}
