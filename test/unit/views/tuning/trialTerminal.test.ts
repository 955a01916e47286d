// A trial task's pseudoterminal and its CustomExecution callback, as VS Code drives them (issue 11
// item 8): VS Code calls the callback once per run of the task, Rerun Task included.
import assert from 'node:assert/strict';
import { closesWhenEnded, NoticeTerminal, TrialTerminal, trialExecution } from '../../../../src/views/tuning/trialTerminal';

/** What VS Code does with a pseudoterminal: listen, open, collect the text and the exit code. */
function drive(t: TrialTerminal | NoticeTerminal): { text: () => string; closed: () => number | undefined } {
  let text = '';
  let code: number | undefined;
  t.onDidWrite((s) => { text += s; });
  t.onDidClose((c) => { code = c; });
  t.open();
  return { text: () => text, closed: () => code };
}

describe('trial tasks: the pseudoterminal and Rerun Task', () => {
  it('shows the trial\'s output and ends the task with the trial\'s exit code', async () => {
    let terminated = 0;
    const trial = new TrialTerminal('exp · trial 24', () => { terminated++; });
    trial.write('before open\n');
    const execute = trialExecution(trial, () => 'not again');
    const first = await execute();
    assert.equal(first, trial, 'the first run of the task is the trial');
    const seen = drive(first);
    trial.write('epoch 1\n');
    assert.equal(seen.closed(), undefined, 'open while the trial runs');
    trial.end(130, 'Stopped.');
    assert.equal(seen.closed(), 130);
    assert.equal(seen.text(), '\x1b[2mexp · trial 24\x1b[0m\r\nbefore open\r\nepoch 1\r\n\r\nStopped.\r\n');
    assert.equal(terminated, 0, 'ending on its own is not a termination');
  });

  it('Rerun Task on an ended trial says why nothing runs and ends at once, every time it is asked', async () => {
    const trial = new TrialTerminal('exp · trial 24', () => undefined);
    let asked = 0;
    const execute = trialExecution(trial, () => `Rerun Task does not run trial 24 again (call ${++asked})`);
    drive(await execute());
    trial.end(0, 'Trial 24 finished.');
    for (const n of [1, 2]) {
      const rerun = drive(await execute());
      assert.equal(rerun.closed(), 0, `rerun ${n}: the task ends (VS Code would show it running forever, then refuse the next Rerun as already active)`);
      assert.equal(rerun.text(), `\r\nRerun Task does not run trial 24 again (call ${n})\r\n`);
    }
  });

  it('a terminal opened after its trial ended shows the output and closes; closing a running one stops the trial', () => {
    const late = new TrialTerminal('h', () => assert.fail('not a termination'));
    late.end(1, 'failed');
    const seen = drive(late);
    assert.equal(seen.closed(), 1);
    assert.match(seen.text(), /failed\r\n$/);
    let terminated = 0;
    const running = new TrialTerminal('h', () => { terminated++; });
    drive(running);
    running.handleInput('\x03');
    running.close();
    assert.equal(terminated, 2, 'Ctrl-C and closing the terminal both ask to stop the trial');
  });
  it('closes a trial\'s terminal once its task ended, unless the trial failed (its log file keeps the output either way)', () => {
    assert.deepEqual((['done', 'stopped', 'interrupted'] as const).map(closesWhenEnded), [true, true, true]);
    assert.equal(closesWhenEnded('failed'), false, 'a failed trial keeps its terminal open');
    assert.equal(closesWhenEnded('running'), false, 'a running trial is never closed');
  });
});
