import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readCorpora } from '../../../bench/lint/real';
import { corpusLib, formatReport, matchProject, report, type Label, type SeenFinding } from '../../../bench/lint/_realMatch';
import { rules } from '../../../src/lint/linter';

const { blobSha, validateProject, ruleIds } = corpusLib;

const finding = (path: string, line: number, rule = 'accumulated-loss', severity: SeenFinding['severity'] = 'warning'): SeenFinding => ({ path, line, rule, severity, message: `${rule} at ${line}` });
const label = (path: string, line: number, verdict: Label['verdict'], rule = 'accumulated-loss', endLine?: number): Label => ({ path, line, rule, verdict, reason: 'because', ...(endLine ? { endLine } : {}) });
const levels = [
  { id: 'accumulated-loss', severity: 'warning' as const },
  { id: 'missing-no-grad', severity: 'warning' as const },
  { id: 'data-parallel', severity: 'info' as const },
];

describe('real-code corpus: matching findings to labels', () => {
  it('matches on path, rule and a start line inside line..endLine, and nothing else', () => {
    const labels = [label('a.py', 10, 'hazard', 'accumulated-loss', 12), label('a.py', 20, 'safe')];
    const findings = [
      finding('a.py', 12), // inside 10..12: matches the hazard
      finding('a.py', 13), // just past endLine: unlabelled
      finding('a.py', 9), // just before line: unlabelled
      finding('b.py', 10), // other file
      finding('a.py', 10, 'missing-no-grad'), // other rule
      finding('a.py', 20), // falls on the safe label
    ];
    const m = matchProject({ id: 'p', labels }, findings);
    assert.deepEqual(m.outcomes.map((o) => o.findings.map((f) => `${f.path}:${f.line}`)), [['a.py:12'], ['a.py:20']]);
    assert.deepEqual(m.unlabelled.map((f) => `${f.path}:${f.line}:${f.rule}`), ['a.py:13:accumulated-loss', 'a.py:9:accumulated-loss', 'b.py:10:accumulated-loss', 'a.py:10:missing-no-grad']);
  });

  it('counts TP, FP, FN per label and precision/recall per rule, info rules outside the total', () => {
    const project = {
      id: 'p',
      labels: [
        label('a.py', 1, 'hazard'), // found twice: one TP
        label('a.py', 5, 'hazard'), // missed: FN
        label('a.py', 9, 'safe'), // hit: FP
        label('a.py', 12, 'safe'), // not hit
        label('a.py', 15, 'ambiguous'), // hit: in neither precision nor recall
        label('a.py', 18, 'ambiguous'), // not hit
        label('a.py', 3, 'hazard', 'missing-no-grad'), // found
        label('a.py', 7, 'hazard', 'data-parallel'), // found, but info
      ],
    };
    const findings = [finding('a.py', 1), finding('a.py', 1), finding('a.py', 9), finding('a.py', 15), finding('a.py', 30), finding('a.py', 3, 'missing-no-grad'), finding('a.py', 7, 'data-parallel', 'info')];
    const r = report([{ project, findings }], levels);
    const acc = r.rows.find((x) => x.rule === 'accumulated-loss')!;
    assert.deepEqual({ findings: acc.findings, tp: acc.tp, fp: acc.fp, ambiguous: acc.ambiguous, unlabelled: acc.unlabelled, hazards: acc.hazards, safe: acc.safe }, { findings: 5, tp: 1, fp: 1, ambiguous: 1, unlabelled: 1, hazards: 2, safe: 2 });
    assert.equal(acc.precision, 0.5);
    assert.equal(acc.recall, 0.5);
    const dp = r.rows.find((x) => x.rule === 'data-parallel')!;
    assert.equal(dp.counted, false);
    assert.equal(dp.tp, 1);
    // The total: accumulated-loss + missing-no-grad only.
    assert.deepEqual({ tp: r.total.tp, fp: r.total.fp, hazards: r.total.hazards, findings: r.total.findings }, { tp: 2, fp: 1, hazards: 3, findings: 6 });
    assert.equal(r.total.precision, 2 / 3);
    assert.equal(r.total.recall, 2 / 3);
    assert.deepEqual(r.falsePositives.map((o) => o.label.line), [9]);
    assert.deepEqual(r.falseNegatives.map((o) => o.label.line), [5]);
    assert.deepEqual(r.unlabelled.map((f) => `${f.project}:${f.line}`), ['p:30']);
    const rowOf = (rule: string): string => formatReport(r).split('\n').find((l) => l.startsWith(`| ${rule} |`))!;
    assert.equal(rowOf('accumulated-loss'), '| accumulated-loss | warning+ | 5 | 1 | 1 | 1 | 1 | 2 | 1/2 | 0.50 | 0.50 |');
    assert.deepEqual(r.ambiguousHits.map((o) => o.label.line), [15]);
    assert.match(formatReport(r), /\? {2}p\/a\.py:15 accumulated-loss: because/);
    assert.match(formatReport(r), /FP p\/a\.py:9 accumulated-loss: labelled safe: because/);
    assert.match(formatReport(r), /FN p\/a\.py:5 accumulated-loss: because/);
    assert.match(formatReport(r), /p\/a\.py:30 accumulated-loss \[warning\]/);
  });

  it('lists every entry on one line, even when a message holds a line break', () => {
    const project = { id: 'p', labels: [label('a.py', 2, 'safe', 'sampler-shuffle')] };
    const findings = [{ ...finding('a.py', 2, 'sampler-shuffle'), message: 'gets `sampler=\\\n`: raises' }, { ...finding('a.py', 7), message: 'first\r\nsecond' }];
    const text = formatReport(report([{ project, findings }], [{ id: 'sampler-shuffle', severity: 'error' }, ...levels]));
    const fp = text.split('\n').filter((l) => l.startsWith('  FP '));
    assert.deepEqual(fp, ['  FP p/a.py:2 sampler-shuffle: labelled safe: because | ours: gets `sampler=\\\\n`: raises']);
    assert.ok(text.split('\n').includes('  p/a.py:7 accumulated-loss [warning] first\\nsecond'), text);
  });

  it('gives no precision or recall where nothing was labelled, rather than 0 or 1', () => {
    const r = report([{ project: { id: 'p', labels: [] }, findings: [] }], levels);
    assert.equal(r.total.precision, undefined);
    assert.equal(r.total.recall, undefined);
  });
});

describe('real-code corpus: validating a project file', () => {
  const good = {
    id: 'some-project',
    repo: 'owner/some.project',
    commit: 'a'.repeat(40),
    license: 'MIT',
    files: { 'train.py': 'b'.repeat(40) },
    labels: [{ path: 'train.py', line: 3, endLine: 4, rule: 'accumulated-loss', verdict: 'hazard', reason: 'total += loss keeps graphs', fix: 'https://github.com/owner/some.project/commit/abc' }],
  };
  const with_ = (patch: Record<string, unknown>, labelPatch?: Record<string, unknown>): unknown => ({ ...good, ...patch, labels: labelPatch ? [{ ...good.labels[0], ...labelPatch }] : (patch.labels ?? good.labels) });

  it('accepts a valid file', () => {
    assert.deepEqual(validateProject(good, 'some-project.json'), []);
  });

  const cases: [string, unknown, string | RegExp][] = [
    ['an id that is not the file name', with_({ id: 'other' }), /"id" is "other" but the file is named some-project\.json/],
    ['an id with capitals', with_({ id: 'Some-Project' }), /"id" must be lower-case/],
    ['a short commit', with_({ commit: 'abc123' }), /"commit" must be 40 lower-case hex digits, got "abc123"/],
    ['a repo without owner', with_({ repo: 'project' }), /"repo" must be a GitHub owner\/name/],
    ['no license', with_({ license: '' }), /"license"/],
    ['a bad blob sha', with_({ files: { 'train.py': 'xyz' } }), /files\["train\.py"\] must be a git blob sha1/],
    ['a path escaping the repo', with_({ files: { '../x.py': 'b'.repeat(40) } }), /path "\.\.\/x\.py" has an empty, '\.' or '\.\.' part/],
    ['an unknown rule', with_({}, { rule: 'accumulated-losses' }), /labels\[0\]: unknown rule "accumulated-losses"/],
    ['an unknown verdict', with_({}, { verdict: 'maybe' }), /labels\[0\]: "verdict" must be "hazard", "safe" or "ambiguous", got "maybe"/],
    ['line 0', with_({}, { line: 0, endLine: undefined }), /labels\[0\]: "line" must be a whole number of at least 1, got 0/],
    ['a fractional line', with_({}, { line: 2.5, endLine: undefined }), /"line" must be a whole number/],
    ['endLine before line', with_({}, { endLine: 2 }), /labels\[0\]: "endLine" must be a whole number not before "line", got 2/],
    ['a label path not in files', with_({}, { path: 'eval.py' }), /labels\[0\]: path "eval\.py" is not listed in "files"/],
    ['no reason', with_({}, { reason: ' ' }), /labels\[0\]: "reason" must say why/],
    ['a fix that is no link', with_({}, { fix: 'commit abc' }), /"fix" must be an https:\/\/ link/],
    ['a misspelt label field', with_({}, { endline: 5 }), /labels\[0\]: unknown field "endline"/],
    ['a misspelt top field', with_({ label: [] }), /unknown field "label"/],
    ['overlapping labels of one rule', with_({ labels: [good.labels[0], { ...good.labels[0], line: 4, endLine: undefined, verdict: 'safe' }] }), /labels\[1\]: train\.py:4 accumulated-loss overlaps labels\[0\]/],
    ['not an object', [], /expected a JSON object/],
  ];
  for (const [what, value, expected] of cases) {
    it(`refuses ${what}, naming the file and field`, () => {
      const problems = validateProject(value, 'some-project.json');
      assert.ok(problems.length > 0, `no problem reported for ${what}`);
      assert.ok(problems.every((p) => p.startsWith('some-project.json: ')), problems.join('\n'));
      assert.ok(problems.some((p) => (typeof expected === 'string' ? p.includes(expected) : expected.test(p))), `expected ${String(expected)} among:\n${problems.join('\n')}`);
    });
  }

  it('accepts the same rule on two lines that do not overlap', () => {
    assert.deepEqual(validateProject(with_({ labels: [good.labels[0], { ...good.labels[0], line: 5, endLine: undefined }] }), 'some-project.json'), []);
  });

  it('knows exactly the linter\'s rule ids', () => {
    assert.deepEqual([...ruleIds].sort(), rules.map((r) => r.id).sort());
  });

  it('computes git blob ids as git hash-object does', () => {
    // `printf 'hello\n' | git hash-object --stdin` and the empty blob.
    assert.equal(blobSha(Buffer.from('hello\n')), 'ce013625030ba8dba906f756967f9e9ca394464a');
    assert.equal(blobSha(Buffer.alloc(0)), 'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391');
  });
});

describe('real-code corpus: several project folders (bench --corpus)', () => {
  let tmp: string;
  const project = (id: string) => ({ id, repo: 'o/n', commit: 'a'.repeat(40), license: 'MIT', files: { 'a.py': 'b'.repeat(40) }, labels: [] });
  beforeEach(() => {
    tmp = mkdtempSync(join(tmpdir(), 'corpora-'));
    for (const d of ['one', 'two']) mkdirSync(join(tmp, d));
  });
  afterEach(() => rmSync(tmp, { recursive: true, force: true }));

  it('reads every folder and refuses an id found in two of them', () => {
    writeFileSync(join(tmp, 'one', 'p.json'), JSON.stringify(project('p')));
    writeFileSync(join(tmp, 'two', 'q.json'), JSON.stringify(project('q')));
    const ok = readCorpora([join(tmp, 'one'), join(tmp, 'two')]);
    assert.deepEqual(ok.problems, []);
    assert.deepEqual(ok.projects.map((p) => p.id), ['p', 'q']);
    writeFileSync(join(tmp, 'two', 'p.json'), JSON.stringify(project('p')));
    const twice = readCorpora([join(tmp, 'one'), join(tmp, 'two')]);
    assert.deepEqual(twice.problems, [`p.json is in both ${join(tmp, 'one')} and ${join(tmp, 'two')}`]);
    assert.deepEqual(twice.projects.map((p) => p.id), ['p', 'q']);
  });
});
