/**
 * The Curves page, as a pure function of its resource URIs (as the Tuning Results page's
 * resultsHtml.ts), so that the browser tests load exactly what VS Code loads: same CSP, same markup.
 */
import { appMain, renderWebviewPage, type WebviewPageOptions } from '../common/webviewHtml';

export interface CurvesHtmlOptions extends WebviewPageOptions {
  /** The document title's words: a run's name, or `3 runs`. */
  readonly what: string;
  /** The run records' ids: the page keeps them in its state, which VS Code hands back after a window reload. */
  readonly runIds: readonly string[];
}

export function renderCurvesHtml(opts: CurvesHtmlOptions): string {
  return renderWebviewPage(opts, {
    title: `Curves: ${opts.what}`,
    body: appMain(`Loading the curves of ${opts.what}…`, { 'run-ids': opts.runIds.join('\n') }),
  });
}
