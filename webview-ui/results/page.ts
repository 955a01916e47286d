import { asResultsHostMessage, compactValue, formatBytes, formatMetric, formatTrialMemory, outOfMemoryStatus, type HostToResultsMessage, type ResultsExperiment, type ResultsToHostMessage, type ResultsTrial } from '../../src/common/tuningProtocol';
import { CurvesChart, readPalette, ScatterChart } from './charts';

/** What the page remembers across hide/show and reloads (VS Code keeps it for us). */
export interface ResultsState {
  /** `trial`, `status`, `metric`, `iterations`, `memory`, or `param:<name>`. */
  readonly sortKey: string;
  readonly sortDir: 'asc' | 'desc';
  /** The parameter on the scatter's x axis. */
  readonly param: string | null;
  /** The trial picked in the table, drawn in blue. */
  readonly selected: number | null;
  /** The experiment's folder (from the host's markup), for the panel to come back after a window reload. */
  readonly experimentKey: string | null;
}

/** The part of VS Code's webview API the page uses. */
export interface ResultsApi {
  postMessage(message: ResultsToHostMessage): void;
  getState(): ResultsState | undefined;
  setState(state: ResultsState): ResultsState;
}

const defaultState: ResultsState = { sortKey: 'trial', sortDir: 'asc', param: null, selected: null, experimentKey: null };

const statusOrder: Record<ResultsTrial['status'], number> = { running: 0, pending: 1, done: 2, stopped: 3, interrupted: 4, failed: 5 };

export function statusText(t: ResultsTrial): string {
  switch (t.status) {
    case 'pending': return 'Pending';
    case 'running': return t.attempt > 1 ? `Running (attempt ${t.attempt})` : 'Running';
    case 'done': return 'Done';
    case 'failed': {
      if (!t.outOfMemory) return 'Failed';
      const words = outOfMemoryStatus(t.outOfMemory);
      return words.charAt(0).toUpperCase() + words.slice(1);
    }
    case 'interrupted': return 'Interrupted';
    case 'stopped':
      switch (t.stopReason) {
        case 'asha': return 'Stopped by ASHA';
        case 'maxT': return 'Done (maxT)';
        case 'user': return 'Stopped by you';
        default: return 'Stopped';
      }
    default: {
      const unreachable: never = t.status;
      return String(unreachable);
    }
  }
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, props: { className?: string; text?: string; title?: string } = {}, ...children: Node[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (props.className) e.className = props.className;
  if (props.text !== undefined) e.textContent = props.text;
  if (props.title) e.title = props.title;
  e.append(...children);
  return e;
}

/** The largest memory of a trial: allocated on CUDA, RSS on a CPU (what the Peak memory column sorts by). */
function peakBytes(t: ResultsTrial): number | null {
  if (!t.memory) return null;
  return t.memory.device === 'cuda' ? t.memory.peakAllocatedBytes : t.memory.peakRssBytes;
}

/** The Peak memory cell: `1.2 GiB / 1.5 GiB` (allocated / reserved) on CUDA, `312.4 MiB RSS` on a CPU. */
function memoryText(t: ResultsTrial): string {
  if (!t.memory) return '—';
  return t.memory.device === 'cuda' ? `${formatBytes(t.memory.peakAllocatedBytes)} / ${formatBytes(t.memory.peakReservedBytes)}` : `${formatBytes(t.memory.peakRssBytes)} RSS`;
}

function configText(values: Readonly<Record<string, unknown>>): string {
  return Object.entries(values).map(([k, v]) => `${k}=${compactValue(v)}`).join(' ');
}

/**
 * The "Tuning Results" page: a summary with the best trial and "Apply Best Config", the learning
 * curves and the metric-against-parameter scatter, and the sortable table of trials. Built once on
 * `results/init`; each `results/trial` replaces one row's data and redraws.
 */
export class ResultsPage {
  private experiment: ResultsExperiment | undefined;
  private readonly trials = new Map<number, ResultsTrial>();
  private state: ResultsState;
  private built: { summary: HTMLElement; curves: CurvesChart; scatter: ScatterChart; select: HTMLSelectElement; table: HTMLTableElement } | undefined;

  constructor(private readonly root: HTMLElement, private readonly api: ResultsApi) {
    this.state = { ...defaultState, ...(api.getState() ?? {}) };
    // Saved at once, not at the first sort: VS Code restores a panel after a reload only with a state.
    const key = root.dataset.experimentKey;
    if (key && key !== this.state.experimentKey) {
      this.state = { ...this.state, experimentKey: key };
      api.setState(this.state);
    }
  }

  handle(message: HostToResultsMessage): void {
    switch (message.type) {
      case 'results/init':
        this.experiment = message.experiment;
        this.trials.clear();
        for (const t of message.trials) this.trials.set(t.trialId, t);
        this.render();
        break;
      case 'results/trial':
        this.trials.set(message.trial.trialId, message.trial);
        this.render();
        break;
      case 'results/experiment':
        this.experiment = message.experiment;
        this.render();
        break;
      default: {
        const unreachable: never = message;
        console.warn('results: unhandled message', unreachable);
      }
    }
  }

  /** The window's `message` events: only well-formed host messages get through. */
  onWindowMessage(data: unknown): void {
    const m = asResultsHostMessage(data);
    if (m) this.handle(m);
  }

  themeChanged(): void {
    const p = readPalette();
    this.built?.curves.setPalette(p);
    this.built?.scatter.setPalette(p);
  }

  private setState(patch: Partial<ResultsState>): void {
    this.state = { ...this.state, ...patch };
    this.api.setState(this.state);
    this.render();
  }

  private build(): NonNullable<ResultsPage['built']> {
    this.root.replaceChildren();
    const summary = el('header', { className: 'summary' });
    const curvesHost = el('div');
    const scatterHost = el('div');
    const select = el('select');
    select.id = 'scatter-param';
    select.setAttribute('aria-label', 'Parameter on the x axis');
    select.addEventListener('change', () => this.setState({ param: select.value }));
    const curvesCaption = el('figcaption', { className: 'curves-caption' });
    const scatterCaption = el('figcaption', { className: 'scatter-caption' });
    const charts = el('section', { className: 'charts' },
      el('figure', {}, curvesCaption, curvesHost),
      el('figure', {}, scatterCaption, scatterHost));
    const table = el('table', { className: 'trials' });
    table.setAttribute('aria-label', 'Trials');
    this.root.append(summary, charts, table);
    const palette = readPalette();
    // A click on a curve selects its trial (as a click on its row), again clears it.
    const curves = new CurvesChart(curvesHost, palette, (trialId) => this.setState({ selected: trialId }));
    return { summary, curves, scatter: new ScatterChart(scatterHost, palette), select, table };
  }

  /** The link to the trial's log file (kept in the experiment's folder): the host opens it in an editor. */
  private logLink(t: ResultsTrial): HTMLAnchorElement {
    const a = el('a', { className: 'log-link', text: t.log, title: `Open ${t.log} (the trial's whole output) in an editor` });
    a.href = '#';
    a.addEventListener('click', (ev) => {
      ev.preventDefault();
      ev.stopPropagation(); // not a click on the row (selection)
      this.api.postMessage({ type: 'results/openLog', trialId: t.trialId });
    });
    a.addEventListener('dblclick', (ev) => ev.stopPropagation());
    // Enter on the link opens the log (its click), not the row's terminal.
    a.addEventListener('keydown', (ev) => ev.stopPropagation());
    return a;
  }

  private sorted(): ResultsTrial[] {
    const { sortKey, sortDir } = this.state;
    const sign = sortDir === 'asc' ? 1 : -1;
    const key = (t: ResultsTrial): number | string | null => {
      if (sortKey === 'trial') return t.trialId;
      if (sortKey === 'status') return statusOrder[t.status];
      if (sortKey === 'metric') return t.metric;
      if (sortKey === 'iterations') return t.iterations;
      if (sortKey === 'memory') return peakBytes(t);
      if (sortKey.startsWith('param:')) {
        const v = t.values[sortKey.slice('param:'.length)];
        return v === undefined ? null : typeof v === 'number' ? v : compactValue(v);
      }
      return t.trialId;
    };
    return [...this.trials.values()].sort((a, b) => {
      const ka = key(a), kb = key(b);
      // Missing values go last whichever the direction; ties by trial number.
      if (ka === null || kb === null) return ka === kb ? a.trialId - b.trialId : ka === null ? 1 : -1;
      const c = typeof ka === 'number' && typeof kb === 'number' ? ka - kb : String(ka).localeCompare(String(kb), undefined, { numeric: true });
      return c !== 0 ? sign * c : a.trialId - b.trialId;
    });
  }

  private render(): void {
    const e = this.experiment;
    if (!e) return;
    this.built ??= this.build();
    const b = this.built;
    const trials = [...this.trials.values()].sort((x, y) => x.trialId - y.trialId);
    const params = e.params.map((p) => p.name);
    const param = this.state.param && params.includes(this.state.param) ? this.state.param : params[0] ?? null;

    this.renderSummary(b.summary, e, trials);

    const curvesCaption = this.root.querySelector('.curves-caption') as HTMLElement;
    curvesCaption.textContent = `Learning curves: ${e.metric} by ${e.timeAttr}`;
    const scatterCaption = this.root.querySelector('.scatter-caption') as HTMLElement;
    if (!scatterCaption.contains(b.select)) scatterCaption.append(`${e.metric} against`, b.select);
    scatterCaption.firstChild!.textContent = `${e.metric} against`;
    if ([...b.select.options].map((o) => o.value).join('\n') !== params.join('\n')) {
      b.select.replaceChildren(...params.map((p) => { const o = el('option', { text: p }); o.value = p; return o; }));
    }
    b.select.disabled = params.length === 0;
    if (param) b.select.value = param;

    b.curves.update(e, trials, this.state.selected);
    b.scatter.update(e, trials, param);
    this.renderTable(b.table, e);
  }

  private renderSummary(summary: HTMLElement, e: ResultsExperiment, trials: readonly ResultsTrial[]): void {
    const running = trials.filter((t) => t.status === 'running').length;
    const state = e.state === 'running'
      ? `Running · ${trials.length} of ${e.totalTrials} trials started · ${running} running`
      : e.state === 'stopped' ? `Stopped · ${trials.length} of ${e.totalTrials} trials ran; Tune Hyperparameters… resumes it`
        : e.state === 'done' ? `Finished · ${trials.length} trial${trials.length === 1 ? '' : 's'}`
          : `From the journal · ${trials.length} of ${e.totalTrials} trials`;
    const best = e.best ? this.trials.get(e.best.trialId) : undefined;
    const bestText = e.best
      ? `Best: Trial ${e.best.trialId} · ${e.metric} ${formatMetric(e.best.metric)} (${e.mode === 'min' ? 'lowest' : 'highest'})${best && Object.keys(best.values).length ? ` · ${configText(best.values)}` : ''}`
      : `No best trial yet: none has ended with a ${e.metric}`;
    const apply = document.createElement('vscode-button');
    apply.id = 'apply-best';
    apply.textContent = 'Apply Best Config';
    apply.title = e.apply.kind === 'job' ? `Write the best trial's config into ${e.apply.file} (an edit you can undo)` : 'Copy the best trial\'s config as JSON (command trials have no job file to write it into)';
    if (!e.best) apply.setAttribute('disabled', '');
    apply.addEventListener('click', () => {
      if (this.experiment?.best) this.api.postMessage({ type: 'results/applyBest' });
    });
    summary.replaceChildren(
      el('h1', { text: e.name }),
      el('span', { className: 'state', text: state }),
      el('div', { className: 'best-summary' }, el('span', { className: 'best-text', text: bestText }), apply),
    );
  }

  private renderTable(table: HTMLTableElement, e: ResultsExperiment): void {
    // Only trials the companion watched have a memory (command trials running a Python script, torchrun jobs).
    const withMemory = [...this.trials.values()].some((t) => t.memory);
    const columns: Array<{ key: string; label: string; numeric: boolean }> = [
      { key: 'trial', label: 'Trial', numeric: false },
      { key: 'status', label: 'Status', numeric: false },
      { key: 'metric', label: e.metric, numeric: true },
      { key: 'iterations', label: 'Iterations', numeric: true },
      ...(withMemory ? [{ key: 'memory', label: 'Peak memory', numeric: true }] : []),
      ...e.params.map((p) => ({ key: `param:${p.name}`, label: p.name, numeric: false })),
      { key: 'log', label: 'Log', numeric: false },
    ];
    const head = el('tr');
    for (const c of columns) {
      const button = el('button', { text: c.label, title: `Sort by ${c.label}` });
      button.type = 'button';
      button.addEventListener('click', () => {
        const same = this.state.sortKey === c.key;
        this.setState({ sortKey: c.key, sortDir: same && this.state.sortDir === 'asc' ? 'desc' : 'asc' });
      });
      const th = el('th', { className: c.numeric ? 'num' : '' }, button);
      th.dataset.key = c.key;
      th.scope = 'col';
      th.setAttribute('aria-sort', this.state.sortKey === c.key ? (this.state.sortDir === 'asc' ? 'ascending' : 'descending') : 'none');
      head.append(th);
    }
    const body = el('tbody');
    const rows = this.sorted();
    for (const t of rows) {
      const tr = el('tr');
      tr.dataset.trialId = String(t.trialId);
      tr.tabIndex = 0;
      const isBest = t.trialId === e.best?.trialId;
      if (isBest) tr.classList.add('best');
      if (t.trialId === this.state.selected) {
        tr.classList.add('selected');
        tr.setAttribute('aria-selected', 'true');
      }
      const id = el('td', { className: 'trial', text: String(t.trialId) });
      if (isBest) id.append(el('span', { className: 'badge', text: 'best' }));
      const status = el('td', { className: `status status-${t.status}`, text: statusText(t), title: t.error ?? t.stopMessage ?? '' });
      tr.append(
        id,
        status,
        el('td', { className: 'num metric', text: t.metric === null ? '—' : formatMetric(t.metric), title: t.metric === null ? 'no report yet' : String(t.metric) }),
        el('td', { className: 'num iterations', text: String(t.iterations) }),
        ...(withMemory ? [el('td', { className: 'num memory', text: memoryText(t), title: t.memory ? `Peak memory: ${formatTrialMemory(t.memory)}` : 'no memory reported (no optimizer step seen)' })] : []),
        ...e.params.map((p) => el('td', { className: 'param', text: p.name in t.values ? compactValue(t.values[p.name]) : '—' })),
        el('td', { className: 'log' }, this.logLink(t)),
      );
      tr.addEventListener('click', () => this.setState({ selected: this.state.selected === t.trialId ? null : t.trialId }));
      tr.addEventListener('dblclick', () => this.api.postMessage({ type: 'results/showTrial', trialId: t.trialId }));
      tr.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter') this.api.postMessage({ type: 'results/showTrial', trialId: t.trialId });
        if (ev.key === ' ') {
          ev.preventDefault();
          this.setState({ selected: this.state.selected === t.trialId ? null : t.trialId });
        }
      });
      body.append(tr);
    }
    const focused = (document.activeElement as HTMLElement | null)?.closest?.('th')?.dataset.key;
    table.replaceChildren(el('thead', {}, head), body);
    if (rows.length === 0) body.append(el('tr', {}, Object.assign(el('td', { className: 'empty', text: 'No trial has started yet.' }), { colSpan: columns.length })));
    // Sorting rebuilds the header: keep the keyboard focus on the button that was pressed.
    if (focused) table.querySelector<HTMLElement>(`th[data-key="${CSS.escape(focused)}"] button`)?.focus();
  }
}
