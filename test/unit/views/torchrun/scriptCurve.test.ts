import assert from 'node:assert/strict';
import { ScriptCurve, trainingLossOf } from '../../../../src/views/torchrun/scriptCurve';

describe('a torchrun job\'s card from its script\'s metrics', () => {
  it('draws the training loss over the printed loss lines in order and shows the last of every metric', () => {
    const c = new ScriptCurve();
    assert.deepEqual(c.panel(), { lossSteps: [], loss: [], lossAxis: 'report' });
    c.add({ type: 'job/report', source: 'output', metrics: { loss: 0.98 }, epoch: 1 });
    c.add({ type: 'job/report', source: 'output', metrics: { loss: 0.58 }, epoch: 1 });
    c.add({ type: 'job/report', source: 'output', metrics: { test_loss: 0.4, test_acc: 0.945 } });
    assert.deepEqual(c.panel(), { lossSteps: [1, 2], loss: [0.98, 0.58], lossAxis: 'report', metrics: 'loss 0.58 · test_loss 0.4 · test_acc 94.50%' });
  });

  it('over the steps the script reported, when every loss named its step', () => {
    const c = new ScriptCurve();
    c.add({ type: 'job/report', source: 'report', metrics: { train_loss: 2.5 }, step: 100 });
    c.add({ type: 'job/report', source: 'report', metrics: { train_loss: 1.5 }, step: 200 });
    assert.deepEqual(c.panel().lossSteps, [100, 200]);
    assert.equal(c.panel().lossAxis, 'step');
  });

  it('takes loss, train_loss or another loss that is no test or validation one', () => {
    assert.equal(trainingLossOf({ val_loss: 1, loss: 2 }), 2);
    assert.equal(trainingLossOf({ val_loss: 1, loss_d: 3 }), 3);
    assert.equal(trainingLossOf({ val_loss: 1, test_loss: 2, acc: 0.5 }), undefined);
  });
});
