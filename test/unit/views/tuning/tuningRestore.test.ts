// A "Tuning Results" tab after a window reload: the state the page saved names the experiment
// whose journal the panel reads back.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { restoreTarget } from '../../../../src/views/tuning/tuningRestore';
import { renderResultsHtml } from '../../../../src/views/tuning/resultsHtml';

describe('restoring a Tuning Results tab after a window reload', () => {
  const root = mkdtempSync(join(tmpdir(), 'tune-restore-'));
  const ws = join(root, 'project');
  const other = join(root, 'other');
  const experiments = join(ws, '.gpu-workbench', 'experiments');
  const dir = join(experiments, 'quadratic-2');
  mkdirSync(dir, { recursive: true });
  mkdirSync(other, { recursive: true });
  writeFileSync(join(dir, 'journal.jsonl'), '{"type":"journal/header","version":1,"name":"quadratic-2","spec":{},"at":0}\n');
  const folders = [{ name: 'other', fsPath: other }, { name: 'project', fsPath: ws }];
  after(() => rmSync(root, { recursive: true, force: true }));

  it('finds the experiment the saved state names, in the workspace folder that holds it', () => {
    const r = restoreTarget({ sortKey: 'metric', sortDir: 'asc', param: null, selected: 3, experimentKey: dir }, folders);
    assert.ok('entry' in r, JSON.stringify(r));
    assert.equal(r.entry.dir, dir);
    assert.equal(r.entry.name, 'quadratic-2');
    assert.equal(r.entry.folder, 'project');
    assert.ok(r.entry.mtime > 0);
  });

  it('says why not when the journal is gone, the folder is not this window\'s, or the state names nothing', () => {
    const gone = restoreTarget({ experimentKey: join(experiments, 'deleted') }, folders);
    assert.deepEqual(gone, { problem: `${join(experiments, 'deleted', 'journal.jsonl')} is gone` });
    const elsewhere = restoreTarget({ experimentKey: dir }, [{ name: 'other', fsPath: other }]);
    assert.deepEqual(elsewhere, { problem: `${dir} is not an experiment of this window's workspace folders` });
    // Not an experiment folder even inside the workspace (state from a page that was tampered with).
    assert.ok('problem' in restoreTarget({ experimentKey: ws }, folders));
    assert.ok('problem' in restoreTarget({ experimentKey: join(dir, '..', '..', '..') }, folders));
    for (const state of [undefined, null, 7, {}, { sortKey: 'trial' }, { experimentKey: '' }, { experimentKey: 42 }]) {
      const r = restoreTarget(state, folders);
      assert.ok('problem' in r, `${JSON.stringify(state)}: ${JSON.stringify(r)}`);
    }
  });

  it('the page gets the experiment\'s folder in its markup, escaped, to keep in its state', () => {
    const html = renderResultsHtml({ cspSource: 'vscode-resource:', nonce: 'abcdefghijklmnop1234', scriptUri: 'r.js', styleUris: [], experiment: 'q', experimentKey: '/w/.gpu-workbench/experiments/a"b<c' });
    assert.match(html, /<main id="app" aria-live="polite" data-experiment-key="\/w\/\.gpu-workbench\/experiments\/a&quot;b&lt;c">/);
  });
});
