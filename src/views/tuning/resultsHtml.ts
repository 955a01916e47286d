/**
 * The "Tuning Results" page, as a pure function of its resource URIs, so that the browser tests
 * load exactly what VS Code loads (same CSP, same markup) without a `vscode` import. The page's
 * own styles are adopted by its script (constructable style sheets, which CSP does not govern),
 * so the only style sheet it links is uPlot's.
 */
import { appMain, renderWebviewPage, type WebviewPageOptions } from '../common/webviewHtml';

export interface ResultsHtmlOptions extends WebviewPageOptions {
  /** The experiment's name, for the document title. */
  readonly experiment: string;
  /**
   * The experiment's folder: the page keeps it in its state, which VS Code hands back after a
   * window reload so that the panel comes back with the same experiment's results.
   */
  readonly experimentKey?: string;
}

export function renderResultsHtml(opts: ResultsHtmlOptions): string {
  return renderWebviewPage(opts, {
    title: `Tuning Results: ${opts.experiment}`,
    body: appMain(`Loading the results of ${opts.experiment}…`, { 'experiment-key': opts.experimentKey || undefined }),
  });
}
