import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AgentLog, type ElasticEvent } from '../../../../src/training/launchers/multinode';
import { outputLine } from '../../../../src/training/launchers/outputLines';
import { ElasticStatus } from '../../../../src/views/torchrun/elasticStatus';
import { fixtures } from '../../../paths';

/** The agent's events of a real two-node run (torch 1.13) whose other node was killed: one restart, then a world of 2. */
function recordedEvents(): ElasticEvent[] {
  const agent = new AgentLog();
  const events: ElasticEvent[] = [];
  for (const raw of readFileSync(join(fixtures, 'torchrun', 'nodes-restart.txt'), 'utf8').split('\n')) {
    const line = outputLine(raw);
    const note = line.rank === undefined ? agent.push(line.text) : undefined;
    if (note) events.push(note.elastic);
  }
  return events;
}

describe('torchrun card: a multi-node job\'s elastic state', () => {
  it('says which node this is, the world and each restart of the same job, as the agent reported them', () => {
    const events = recordedEvents();
    assert.equal(events.length, 3, JSON.stringify(events));
    const status = new ElasticStatus();
    const seen = events.map((e) => { status.onEvent(e); return status.text(); });
    assert.deepEqual(seen, [
      'node 0 of 2 · world 4',
      'node 0 of 2 · world 4 · restart 1 of 3 · workers failed: restarting them in a new round',
      'node 0 of 1 · world 2 · restart 1 of 3',
    ]);
    assert.equal(status.restartsText(), 'after 1 restart of its workers');
  });

  it('says nothing before the first event, and no restart for a job that had none; nodes that join restart without counting', () => {
    const status = new ElasticStatus();
    assert.equal(status.text(), undefined);
    assert.equal(status.restartsText(), undefined);
    status.onEvent({ kind: 'rendezvous', restart: 0, groupRank: 1, nodes: 2, worldSize: 4 });
    assert.equal(status.text(), 'node 1 of 2 · world 4');
    status.onEvent({ kind: 'restart', why: 'membership' });
    assert.equal(status.text(), 'node 1 of 2 · world 4 · nodes joined: restarting the workers with them');
    status.onEvent({ kind: 'rendezvous', restart: 0, groupRank: 1, nodes: 3, worldSize: 6 });
    assert.equal(status.text(), 'node 1 of 3 · world 6');
    assert.equal(status.restartsText(), undefined);
  });
});
