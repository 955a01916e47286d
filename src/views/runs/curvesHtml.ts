/**
 * The Curves page, as a pure function of its resource URIs (as the Tuning Results page's
 * resultsHtml.ts), so that the browser tests load exactly what VS Code loads: same CSP, same markup.
 */
import { escapeHtml, renderWebviewPage, type WebviewPageOptions } from '../common/webviewHtml';

export interface CurvesHtmlOptions extends WebviewPageOptions {
  /** The document title's words: a run's name, or `3 runs`. */
  readonly what: string;
  /** The run records' ids: the page keeps them in its state, which VS Code hands back after a window reload. */
  readonly runIds: readonly string[];
}

export function renderCurvesHtml(opts: CurvesHtmlOptions): string {
  return renderWebviewPage(opts, {
    title: `Curves: ${opts.what}`,
    body: `    <main id="app" aria-live="polite" data-run-ids="${escapeHtml(opts.runIds.join('\n'))}">
      <p class="waiting">Loading the curves of ${escapeHtml(opts.what)}…</p>
    </main>`,
  });
}
