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
