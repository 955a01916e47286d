import type uPlot from 'uplot';

/**
 * What the line charts of the Curves page and the Tuning Results page share: a tooltip naming the
 * line under the pointer and its point (the nearest point of any line, within `reachPx`), and a
 * click on a line to highlight it (the others are dimmed) or, on the highlighted line or away from
 * any, to clear it. The chart keeps the highlight (a key of its own per line) and tells this class;
 * a click only reports which line was hit (`onPick`).
 *
 * The tooltip is an element over the plot (uPlot's `over`), not canvas pixels, so a screen
 * reader and the tests can read it; the chart's box says what is highlighted in `data-highlight`.
 */
export interface LineFocusOptions {
  /** The plot's series `i` (1-based, as uPlot counts): its key, or undefined for one that cannot be picked. */
  keyOf(i: number): string | undefined;
  /** The tooltip's text for series `i`'s point (x, y). */
  describe(i: number, x: number, y: number): string;
  /** A click on the line of `key`, or away from every line (null). */
  onPick(key: string | null): void;
}

/** How near (CSS pixels) the pointer must be to a point for its tooltip, or for a click to hit its line. */
const reachPx = 30;
/** The alpha of a line that is not the highlighted one, relative to its own. */
const dimmed = 0.15;

interface Hit {
  readonly series: number;
  readonly idx: number;
  readonly dist: number;
}

/** The index in ascending `xs` nearest to `x`. */
function nearestIndex(xs: ArrayLike<number>, x: number): number {
  let lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x) lo = mid;
    else hi = mid;
  }
  return Math.abs(xs[hi] - x) < Math.abs(xs[lo] - x) ? hi : lo;
}

export class LineFocus {
  private readonly tip: HTMLElement;
  private highlighted: string | null = null;
  private plot: uPlot | undefined;
  /** Each series' own alpha, as the chart built it (the dimmed ones are a fraction of it). */
  private base: number[] = [];

  constructor(private readonly box: HTMLElement, private readonly opts: LineFocusOptions) {
    this.tip = document.createElement('div');
    this.tip.className = 'chart-tooltip';
    this.tip.setAttribute('role', 'tooltip');
    this.tip.hidden = true;
  }

  /** uPlot options for a plot this class serves: its cursor (no uPlot points or focus of its own) and hooks. */
  options(): Pick<uPlot.Options, 'cursor' | 'hooks'> {
    return {
      cursor: { drag: { x: false, y: false }, points: { show: false }, focus: { prox: -1 } },
      hooks: {
        // init: before the first draw (a redraw asked for in `ready` would be lost), so a new plot starts dimmed as it should.
        init: [(u) => this.attach(u)],
        setCursor: [(u) => this.hover(u)],
        destroy: [(u) => { if (this.plot === u) this.plot = undefined; }],
      },
    };
  }

  /** Highlights the line of `key` (null: none), also on plots made later. */
  highlight(key: string | null): void {
    this.highlighted = key;
    this.box.dataset.highlight = key ?? '';
    this.dim();
  }

  private attach(u: uPlot): void {
    this.plot = u;
    this.base = u.series.map((s) => s.alpha ?? 1);
    u.over.append(this.tip);
    u.over.addEventListener('click', (ev) => {
      const rect = u.over.getBoundingClientRect();
      const hit = this.nearest(u, ev.clientX - rect.left, ev.clientY - rect.top);
      const key = hit ? this.opts.keyOf(hit.series) : undefined;
      this.opts.onPick(key === undefined || key === this.highlighted ? null : key);
    });
    u.over.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    this.dim(false);
  }

  /** Sets each line's alpha for the highlight; `redraw`: draws it now (not for a plot not drawn yet). */
  private dim(redraw = true): void {
    const u = this.plot;
    if (!u) return;
    u.series.forEach((s, i) => {
      if (i === 0) return;
      const mine = this.highlighted === null || this.opts.keyOf(i) === this.highlighted;
      s.alpha = (this.base[i] ?? 1) * (mine ? 1 : dimmed);
    });
    if (redraw) u.redraw(false);
  }

  private hover(u: uPlot): void {
    const { left, top } = u.cursor;
    const hit = left === undefined || top === undefined || left < 0 ? undefined : this.nearest(u, left, top);
    if (!hit) {
      this.tip.hidden = true;
      return;
    }
    const x = u.data[0][hit.idx];
    const y = u.data[hit.series][hit.idx] as number;
    this.tip.textContent = this.opts.describe(hit.series, x, y);
    this.tip.dataset.series = this.opts.keyOf(hit.series) ?? '';
    this.tip.hidden = false;
    const px = u.valToPos(x, 'x');
    const py = u.valToPos(y, u.series[hit.series].scale ?? 'y');
    // Beside the point, inside the plot: to its left on the right half, below it on the top half.
    const width = u.over.clientWidth;
    this.tip.style.left = px > width / 2 ? '' : `${px + 10}px`;
    this.tip.style.right = px > width / 2 ? `${width - px + 10}px` : '';
    this.tip.style.top = `${Math.max(0, py - 28)}px`;
  }

  /** The point of a shown line nearest to (left, top) in the plot's CSS pixels, within reach. */
  private nearest(u: uPlot, left: number, top: number): Hit | undefined {
    const xs = u.data[0];
    if (!xs.length) return undefined;
    const at = nearestIndex(xs, u.posToVal(left, 'x'));
    let best: Hit | undefined;
    const pos = (series: number, idx: number): [number, number] => [u.valToPos(xs[idx], 'x'), u.valToPos(u.data[series][idx] as number, u.series[series].scale ?? 'y')];
    for (let s = 1; s < u.series.length; s++) {
      if (!u.series[s].show || this.opts.keyOf(s) === undefined) continue;
      const ys = u.data[s];
      // The nearest point of this line each side of the pointer's x (its data has gaps where other lines have points).
      let l = at, r = at + 1;
      while (l >= 0 && ys[l] == null) l--;
      while (r < xs.length && ys[r] == null) r++;
      const ends = [l >= 0 ? l : -1, r < xs.length ? r : -1].filter((i) => i >= 0);
      if (!ends.length) continue;
      const pts = ends.map((i) => pos(s, i));
      // The distance to the nearer point, or to the segment between the two (a line of few points is long between them).
      let dist = Math.min(...pts.map(([px, py]) => Math.hypot(px - left, py - top)));
      if (pts.length === 2) {
        const [[x1, y1], [x2, y2]] = pts;
        const len2 = (x2 - x1) ** 2 + (y2 - y1) ** 2;
        const t = len2 > 0 ? Math.max(0, Math.min(1, ((left - x1) * (x2 - x1) + (top - y1) * (y2 - y1)) / len2)) : 0;
        dist = Math.min(dist, Math.hypot(x1 + t * (x2 - x1) - left, y1 + t * (y2 - y1) - top));
      }
      const idx = pts.length === 2 && Math.abs(pts[1][0] - left) < Math.abs(pts[0][0] - left) ? ends[1] : ends[0];
      if (dist <= reachPx && (!best || dist < best.dist)) best = { series: s, idx, dist };
    }
    return best;
  }
}
