import type uPlot from 'uplot';

/**
 * Keeps a uPlot chart as wide as its container. When the width changes it resizes the plot,
 * or draws it if there is none yet: a chart in a collapsed card or a hidden section has no
 * width, so it is drawn when it first gets one. A chart asks `measure()` for the width to
 * create its plot with.
 */
export class ChartFit {
  private width = 0;
  private readonly observer: ResizeObserver;

  constructor(
    private readonly container: HTMLElement,
    height: number,
    plot: () => uPlot | undefined,
    draw: () => void,
  ) {
    this.observer = new ResizeObserver(() => {
      const width = Math.floor(container.clientWidth);
      if (width <= 0 || width === this.width) return;
      this.width = width;
      const p = plot();
      if (p) p.setSize({ width, height });
      else draw();
    });
    this.observer.observe(container);
  }

  /** The container's width now, the last known one while it is hidden, 0 if it never had one (then do not draw). */
  measure(): number {
    this.width = Math.floor(this.container.clientWidth) || this.width;
    return this.width;
  }

  dispose(): void {
    this.observer.disconnect();
  }
}

/**
 * What every chart of the webviews shares: one uPlot plot in a box it keeps to the width of.
 * A subclass says how to draw (`draw`: create the plot at `fit.measure()` wide, or give it new
 * data, for which `show` does the usual); `redraw` creates it anew, since uPlot takes colours
 * and series only at creation.
 */
export abstract class FittedChart {
  protected plot: uPlot | undefined;
  protected readonly fit: ChartFit;
  /** What the plot was built for (`showKeyed`). */
  private key = '';

  constructor(box: HTMLElement, height: number) {
    this.fit = new ChartFit(box, height, () => this.plot, () => this.draw());
  }

  protected abstract draw(): void;

  /** Gives the plot new data, or creates it (`create`, at the box's width) when there is none and the box has a width. */
  protected show(data: uPlot.AlignedData, create: (width: number) => uPlot): void {
    if (this.plot) {
      this.plot.setData(data);
      return;
    }
    // A collapsed card or a hidden section has no width yet; the fit draws when it gets one.
    const width = this.fit.measure();
    if (width > 0) this.plot = create(width);
  }

  /**
   * As `show`, for a chart whose plot is built for what `key` says (its series, colours, axes): the
   * same key gives the plot new data, another key (or none built yet) creates it anew.
   */
  protected showKeyed(key: string, data: uPlot.AlignedData, create: (width: number) => uPlot): void {
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    const width = this.fit.measure();
    if (width <= 0) return;
    this.plot?.destroy();
    this.key = key;
    this.plot = create(width);
  }

  protected redraw(): void {
    this.plot?.destroy();
    this.plot = undefined;
    this.draw();
  }

  dispose(): void {
    this.fit.dispose();
    this.plot?.destroy();
    this.plot = undefined;
  }
}
