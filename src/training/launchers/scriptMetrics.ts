/**
 * Metrics of a PyTorch script read from what it prints, without changing the script:
 *   `::report::{"loss": 0.12, "step": 30}`          exactly (the companion's report() outside the editor)
 *   `loss 0.123` `loss=0.123` `Loss: 0.123`          a metric's name, then its value
 *   `Epoch 3 ... acc 91.2%`                          a percentage (read as 0.912)
 *   `Accuracy: 9837/10000 (98%)`                     a count of a total (read as 0.9837)
 *   `...it/s, loss=0.123, acc=0.9]`                  tqdm's postfix
 *   `{'loss': 0.6931, 'epoch': 0.01}`                a printed dict (Hugging Face's Trainer)
 *   `Test set: Average loss: 0.05`                   on a line that names the test / validation
 *                                                    phase, the names get its prefix (test_loss)
 * Only names of metrics count (loss, accuracy, perplexity, F1, error, …, with prefixes such as
 * val_ or train/), and epoch / step only beside one of them: a line of configuration
 * (`Namespace(lr=0.1, epochs=14)`), a download's progress, a version or a source line in a
 * traceback reads as no metrics.
 */

export interface LineMetrics {
  readonly metrics: Readonly<Record<string, number>>;
  readonly epoch?: number;
  readonly step?: number;
  /** From a `::report::` line: exact, as the script reported it. */
  readonly exact: boolean;
}

/** Words that make a name a metric's, alone or as its last part (`val_loss`, `Loss_D`, `train/acc`, `Acc@1`). */
const metricWord = /^(?:loss|losses|acc|accuracy|top-?[15]|acc@[15]|ppl|perplexity|f1|f1-score|auc|roc-auc|bleu|rouge\w*|mse|mae|rmse|iou|miou|map|psnr|ssim|dice|wer|cer|err|error|precision|recall|reward|return|score|nll|kl|bpd)$/i;
/** Prefixes and suffixes that keep a metric a metric (`val_loss`, `loss_d`, `train/loss`). */
const qualifier = /^(?:train|training|val|valid|validation|test|eval|evaluation|avg|average|mean|running|batch|epoch|total|d|g|gen|disc|cls|box|obj|rpn|aux)$/i;
const phaseWord = /\b(test|testing|val|valid|validation|eval|evaluation)\b/i;
/** Lines that print a configuration or a version, never metrics. */
const configLine = /^\s*(?:Namespace\(|args\s*[:=]|config\s*[:=]|hparams|hyperparameters|Using\b|torch\b|python\b|version\b)/i;

/** A name's canonical form: lower case, separators as `_` (`Loss_D` → loss_d, `train/acc` → train_acc). */
const canonical = (name: string): string => name.toLowerCase().replace(/[/.\s-]+/g, '_');

function isMetricName(name: string): boolean {
  const parts = name.split(/[_/.-]/).filter(Boolean);
  if (parts.length === 0 || parts.length > 3) return false;
  if (metricWord.test(name)) return true;
  const words = parts.filter((p) => !qualifier.test(p));
  return words.length === 1 && metricWord.test(words[0]);
}

const number = String.raw`[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?`;
/**
 * A name, then `=` or `:` or blanks, then a number: maybe a fraction (`9837/10000`), maybe a percent.
 * The name must not follow a letter, digit or `.` (not part of a path or a longer word); the number
 * must not run on into letters (`3layers`), a path (`1.13.1`), or a time (`00:12`).
 */
const pair = new RegExp(String.raw`(?<![\w@./-])['"]?([A-Za-z][\w@/.-]*?)['"]?\s*(?:[:=]\s*|\s+)(${number})(?:\s*/\s*(\d+)(?![\w.]))?(%)?(?![\w.:/%]|\.\d)`, 'g');
/** `Epoch 3`, `epoch: 3`, `Epoch [3/10]`, `epoch 3/10`, `step 120`, `[0/25]` is not read. */
const counter = /(?<![\w.])['"]?(epoch|step|global_step|iter|iteration)['"]?\s*(?:[:=]\s*|\s+)\[?\s*(\d+(?:\.\d+)?)(?:\s*\/\s*\d+)?\]?(?![\w.])/gi;

/** Metrics a JSON object holds: its numbers (booleans, strings, null are left out); undefined for anything else. */
export function reportMetrics(value: unknown): Record<string, number> | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) if (typeof v === 'number' && Number.isFinite(v)) out[k] = v;
  return out;
}

/** The metrics of one output line (its rank prefix taken off), or undefined when it holds none. */
export function parseMetricLine(text: string): LineMetrics | undefined {
  const at = text.indexOf('::report::');
  if (at !== -1 && text.slice(0, at).trim() === '') {
    let value: unknown;
    try {
      value = JSON.parse(text.slice(at + '::report::'.length));
    } catch {
      return undefined;
    }
    const all = reportMetrics(value);
    if (!all) return undefined;
    const { epoch, step, ...metrics } = all;
    return Object.keys(metrics).length ? { metrics, ...(epoch !== undefined ? { epoch } : {}), ...(step !== undefined ? { step } : {}), exact: true } : undefined;
  }
  if (text.length > 2000 || configLine.test(text)) return undefined;
  const phase = phaseWord.exec(text);
  const metrics: Record<string, number> = {};
  for (const m of text.matchAll(pair)) {
    const [, rawName, value, total, percent] = m;
    if (!isMetricName(rawName)) continue;
    // `acc = 100. * correct / total`: a source line (a traceback's, a warning's), not a printout.
    if (/^\s*[-+*/]\s*[\w(]/.test(text.slice((m.index ?? 0) + m[0].length))) continue;
    let v = Number(value);
    if (total !== undefined) {
      if (Number(total) === 0) continue;
      v /= Number(total);
    } else if (percent) {
      v /= 100;
    }
    if (!Number.isFinite(v)) continue;
    let name = canonical(rawName);
    // "Test set: Average loss: …": the phase the line names, before this metric, unless its name has one.
    if (phase && phase.index < (m.index ?? 0) && !/^(?:test|val|valid|validation|eval)_/.test(name)) name = `${phase[1].toLowerCase().replace(/^(?:testing)$/, 'test').replace(/^(?:valid|validation)$/, 'val').replace(/^evaluation$/, 'eval')}_${name.replace(/^(?:avg|average|mean)_/, '')}`;
    if (name === 'accuracy' || name.endsWith('_accuracy')) name = name.replace(/accuracy$/, 'acc');
    if (!(name in metrics)) metrics[name] = v;
  }
  if (Object.keys(metrics).length === 0) return undefined;
  let epoch: number | undefined;
  let step: number | undefined;
  for (const c of text.matchAll(counter)) {
    const kind = c[1].toLowerCase();
    const v = Number(c[2]);
    if (kind === 'epoch') epoch ??= v;
    else step ??= v;
  }
  return { metrics, ...(epoch !== undefined ? { epoch } : {}), ...(step !== undefined ? { step } : {}), exact: false };
}

/** Whether a metric is a fraction better shown as a percentage (accuracy and its kin, when within 0..1). */
const isFractionName = (name: string): boolean => /(?:^|[_@])(?:acc|accuracy|top[-_]?[15]|acc@[15]|precision|recall|f1)$|accuracy$/i.test(name);

/** Metrics for people, in the order given: `loss 0.0312 · test_acc 98.37%`. */
export function metricsText(metrics: Readonly<Record<string, number>>, max = 6): string {
  const shown = Object.entries(metrics).slice(0, max).map(([k, v]) => `${k} ${isFractionName(k) && v >= 0 && v <= 1 ? `${(100 * v).toFixed(2)}%` : Math.abs(v) >= 1000 ? v.toFixed(1) : v !== 0 && Math.abs(v) < 1e-3 ? v.toExponential(2) : Number(v.toFixed(4)).toString()}`);
  return shown.join(' · ');
}
