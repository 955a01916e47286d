/**
 * How a torchrun job's script takes its batch size, for Find Max Batch Size: the job file's
 * `"batchSize": {"arg": "--batch-size"}` (a script option, in `args` as `--batch-size 64` or
 * `--batch-size=64`) or `"batchSize": {"env": "BATCH_SIZE"}` (an environment variable, in `env`).
 * The value there, when the job sets one, is where the search starts; a trial runs the job with
 * its own value there; the result is written there (`batchSizeEdit`), as an edit of the job file's
 * text that keeps its comments and layout.
 *
 * The batch size is the script's own, which for a torchrun script is usually per process (rank):
 * each trial runs the job as it is (all its processes), so the value found is the one to set.
 */
import { applyEdits, findNodeAtLocation, getNodeValue, modify, parseTree, printParseErrorCode, type Node, type ParseError } from 'jsonc-parser';
import { detectFormatting, minimalReplacement, type TextReplacement } from '../../tuning/applyConfig';

export interface TorchrunBatchSize {
  /** The script's option (`--batch-size`), or */
  readonly arg?: string;
  /** the environment variable (`BATCH_SIZE`) the script reads its batch size from. */
  readonly env?: string;
  /** The batch size the job sets now (in args or env), if it does. */
  readonly current?: number;
}

interface RawBatchJob {
  args?: string[];
  env?: Record<string, string>;
  batchSize?: { arg?: string; env?: string };
}

const wholeNumber = /^[1-9]\d*$/;

/** Where the job's args set the option: the index of the value (`--bs 64`: the 64) or of `--bs=64`, and the value's text. */
function argPlaces(args: readonly string[], arg: string): { index: number; joined: boolean; value: string | undefined }[] {
  const out: { index: number; joined: boolean; value: string | undefined }[] = [];
  args.forEach((a, i) => {
    if (a === arg) out.push({ index: i + 1, joined: false, value: args[i + 1] });
    else if (a.startsWith(`${arg}=`)) out.push({ index: i, joined: true, value: a.slice(arg.length + 1) });
  });
  return out;
}

/**
 * The job's batch size setting with its current value, or the problems with it (JSON pointers
 * naming the field, as JobFileError shows them). Undefined when the job has no `batchSize`.
 * The schema has checked the setting's shape (exactly one of arg, env).
 */
export function batchSizeSetting(j: RawBatchJob): { setting?: TorchrunBatchSize; problems: string[] } {
  const b = j.batchSize;
  if (!b) return { problems: [] };
  const named = b.arg !== undefined ? `"batchSize": {"arg": ${JSON.stringify(b.arg)}}` : `"batchSize": {"env": ${JSON.stringify(b.env)}}`;
  if (b.arg !== undefined) {
    const places = argPlaces(j.args ?? [], b.arg);
    if (places.length > 1) return { problems: [`/args sets ${b.arg} ${places.length} times (at ${places.map((p) => p.index).join(', ')}): keep one, the job's ${named} names it`] };
    const p = places[0];
    if (!p) return { setting: { arg: b.arg }, problems: [] };
    if (p.value === undefined) return { problems: [`/args ends with ${b.arg} without a value after it (the job's ${named}): give the batch size after it, e.g. "${b.arg}", "64"`] };
    if (!wholeNumber.test(p.value)) return { problems: [`/args/${p.index} must be a whole number of at least 1, the batch size for ${b.arg} (the job's ${named}), got ${JSON.stringify(p.joined ? j.args![p.index] : p.value)}`] };
    return { setting: { arg: b.arg, current: Number(p.value) }, problems: [] };
  }
  const name = b.env!;
  const value = j.env?.[name];
  if (value === undefined) return { setting: { env: name }, problems: [] };
  if (!wholeNumber.test(value)) return { problems: [`/env/${name} must be a whole number of at least 1, the batch size (the job's ${named}), got ${JSON.stringify(value)}`] };
  return { setting: { env: name, current: Number(value) }, problems: [] };
}

/** The job's args and env with the batch size set to `n` (replaced where the job sets it, else added). */
export function withBatchSize(b: TorchrunBatchSize, args: readonly string[], env: Readonly<Record<string, string>>, n: number): { args: string[]; env: Record<string, string> } {
  if (b.env !== undefined) return { args: [...args], env: { ...env, [b.env]: String(n) } };
  const arg = b.arg!;
  const out = [...args];
  const p = argPlaces(out, arg)[0];
  if (!p) out.push(arg, String(n));
  else out[p.index] = p.joined ? `${arg}=${n}` : String(n);
  return { args: out, env: { ...env } };
}

/** The setting for people: `--batch-size 128`, `BATCH_SIZE=128`. */
export function batchSizeText(b: Pick<TorchrunBatchSize, 'arg' | 'env'>, n: number): string {
  return b.env !== undefined ? `${b.env}=${n}` : `${b.arg!} ${n}`;
}

export class BatchSizeEditError extends Error {}

/**
 * Writes batch size `n` into a torchrun job file's text where its `batchSize` setting says:
 * the value after the option in `args` (or `--bs=N`), appended to `args` when the job does not
 * set it; `env[NAME]`. Comments and layout are kept; `edit` is the smallest replacement (null
 * when the file has that value already).
 */
export function batchSizeEdit(text: string, n: number, file = '<job>'): { text: string; edit: TextReplacement | null; setting: string } {
  const errors: ParseError[] = [];
  const root = parseTree(text, errors, { allowTrailingComma: true, disallowComments: false });
  if (errors.length || !root || root.type !== 'object') {
    const e = errors[0];
    throw new BatchSizeEditError(`${file}${e ? `:${text.slice(0, e.offset).split('\n').length}: not valid JSON (${printParseErrorCode(e.error)})` : ': not a JSON object'}; fix it before setting the batch size`);
  }
  const job = getNodeValue(root) as RawBatchJob;
  const { setting, problems } = batchSizeSetting(job);
  if (problems.length) throw new BatchSizeEditError(`${file}: ${problems[0]}`);
  if (!setting) throw new BatchSizeEditError(`${file}: has no "batchSize" setting: add "batchSize": {"arg": "--batch-size"} or {"env": "BATCH_SIZE"}`);
  const formattingOptions = detectFormatting(text);
  const at = (path: (string | number)[]): Node | undefined => findNodeAtLocation(root, path);
  let after: string;
  if (setting.env !== undefined) {
    const env = at(['env']);
    if (env && env.type !== 'object') throw new BatchSizeEditError(`${file}: /env is not an object, so ${setting.env} cannot be set in it`);
    after = applyEdits(text, modify(text, ['env', setting.env], String(n), { formattingOptions }));
  } else {
    const args = at(['args']);
    if (args && args.type !== 'array') throw new BatchSizeEditError(`${file}: /args is not a list, so ${setting.arg!} cannot be set in it`);
    const p = argPlaces(job.args ?? [], setting.arg!)[0];
    if (!args) after = applyEdits(text, modify(text, ['args'], [setting.arg!, String(n)], { formattingOptions }));
    else if (p) after = applyEdits(text, modify(text, ['args', p.index], p.joined ? `${setting.arg!}=${n}` : String(n), { formattingOptions }));
    else {
      const once = applyEdits(text, modify(text, ['args', -1], setting.arg!, { formattingOptions, isArrayInsertion: true }));
      after = applyEdits(once, modify(once, ['args', -1], String(n), { formattingOptions, isArrayInsertion: true }));
    }
  }
  return { text: after, edit: minimalReplacement(text, after), setting: batchSizeText(setting, n) };
}
