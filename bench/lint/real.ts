/**
 * Precision and recall of our lint rules on real public training code: the hand-labelled
 * corpus in test/fixtures/lint/real/ (docs/lint-corpus.md), whose files
 * `node scripts/lint-corpus.mjs fetch` puts in ${LINT_CORPUS_DIR:-<repo>/.lint-corpus}.
 *
 *   npm run bench -- lint        (or: npx tsc -p . && node out/bench/lint/real.js [--json] [--corpus DIR]...)
 *
 * Each project is linted as the CLI lints a folder: every file of the project is one
 * workspace (setFile for each, then lintWorkspace), default settings. Findings are matched to
 * labels (bench/lint/_realMatch.ts): per rule, findings, TP, FP, unlabelled, hazards labelled,
 * found, precision and recall (rules at warning level and above), then every false positive,
 * false negative and unlabelled finding. `--json` prints the same as one JSON object.
 * `--corpus DIR` (repeatable) reads the project files from those folders instead of
 * test/fixtures/lint/real (e.g. another labeller's worktree too); an id found twice is an error.
 * Without the cache it says how to fetch it and exits 0; a project not (or wrongly) cached is
 * left out and named.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createLinter, rules } from '../../src/lint/linter';
import { repoRoot } from '../../test/paths';
import { corpusLib, formatReport, report, type Project, type Report, type SeenFinding } from './_realMatch';

export interface CorpusRun {
  readonly cache: string;
  readonly projects: number;
  readonly labels: number;
  /** Projects left out: not cached, or a cached file whose blob sha1 differs. */
  readonly skipped: readonly string[];
  readonly report: Report;
}

/** Reads and validates the project files of every folder; an id in two folders is a problem. */
export function readCorpora(folders: readonly string[]): { projects: Project[]; problems: string[] } {
  const projects: Project[] = [];
  const problems: string[] = [];
  const seen = new Map<string, string>();
  for (const folder of folders) {
    const r = corpusLib.readCorpus(folder);
    problems.push(...r.problems.map((p) => (folders.length > 1 ? `${folder}: ${p}` : p)));
    for (const p of r.projects) {
      const first = seen.get(p.id);
      if (first !== undefined) problems.push(`${p.id}.json is in both ${first} and ${folder}`);
      else {
        seen.set(p.id, folder);
        projects.push(p);
      }
    }
  }
  return { projects, problems };
}

/** Lints every cached project; undefined when the cache folder does not exist. */
export async function runCorpus(cache = corpusLib.cacheFolder(repoRoot), folders: readonly string[] = [corpusLib.corpusFolder(repoRoot)]): Promise<CorpusRun | undefined> {
  const { projects, problems } = readCorpora(folders);
  if (problems.length) throw new Error(`the corpus files have problems (node scripts/lint-corpus.mjs check):\n${problems.join('\n')}`);
  if (!existsSync(cache)) return undefined;
  const skipped: string[] = [];
  const results: { project: Project; findings: SeenFinding[] }[] = [];
  for (const p of projects) {
    const sources: { path: string; rel: string; text: string }[] = [];
    let why: string | undefined;
    for (const [rel, sha] of Object.entries(p.files)) {
      const path = join(cache, p.id, rel);
      if (!existsSync(path)) {
        why = `${rel} not cached`;
        break;
      }
      const bytes = readFileSync(path);
      if (corpusLib.blobSha(bytes) !== sha) {
        why = `cached ${rel} differs from its blob sha1`;
        break;
      }
      sources.push({ path, rel, text: bytes.toString('utf8') });
    }
    if (why) {
      skipped.push(`${p.id} (${why})`);
      continue;
    }
    const errors: string[] = [];
    const linter = await createLinter({ onError: (path, err) => errors.push(`${path}: ${String(err)}`) });
    try {
      const found = linter.lintWorkspace(sources.map((s) => ({ path: s.path, text: s.text })));
      const findings: SeenFinding[] = [];
      for (const s of sources) {
        for (const f of found.get(s.path) ?? []) findings.push({ path: s.rel, line: f.range.start.line + 1, rule: f.ruleId, severity: f.severity, message: f.message });
      }
      if (errors.length) throw new Error(`internal lint errors in ${p.id}: ${errors.join('; ')}`);
      results.push({ project: p, findings });
    } finally {
      linter.dispose();
    }
  }
  const r = report(results, rules.map((rule) => ({ id: rule.id, severity: rule.defaultSeverity })));
  return { cache, projects: results.length, labels: results.reduce((n, x) => n + x.project.labels.length, 0), skipped, report: r };
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const json = argv.includes('--json');
  const folders: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') continue;
    if (a === '--corpus' || a.startsWith('--corpus=')) {
      const v = a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[++i];
      if (!v) throw new Error('--corpus expects a folder of <id>.json project files');
      if (!existsSync(v)) throw new Error(`--corpus: no such folder: ${v}`);
      folders.push(v);
    } else throw new Error(`unknown argument '${a}' (usage: node out/bench/lint/real.js [--json] [--corpus DIR]...)`);
  }
  const run = await runCorpus(undefined, folders.length ? folders : undefined);
  if (!run) {
    const cache = corpusLib.cacheFolder(repoRoot);
    const msg = `skipped: no corpus cache at ${cache} (fetch it: node scripts/lint-corpus.mjs fetch [--mirror DIR]; LINT_CORPUS_DIR picks another folder)`;
    console.log(json ? JSON.stringify({ skipped: msg }) : msg);
    return;
  }
  if (json) {
    console.log(JSON.stringify(run, null, 2));
    return;
  }
  console.log(`real-code corpus: ${run.projects} projects, ${run.labels} labels, cache ${run.cache}`);
  for (const s of run.skipped) console.log(`left out: ${s} (node scripts/lint-corpus.mjs fetch)`);
  console.log(`\n${formatReport(run.report)}`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  });
}
