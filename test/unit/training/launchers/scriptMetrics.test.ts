import assert from 'node:assert/strict';
import { metricsText, parseMetricLine } from '../../../../src/training/launchers/scriptMetrics';

const metrics = (line: string) => parseMetricLine(line)?.metrics;

describe('metrics read from a script\'s output', () => {
  it('reads pytorch/examples mnist\'s train and test lines, the test ones as test_ metrics', () => {
    assert.deepEqual(parseMetricLine('Train Epoch: 3 [12800/60000 (21%)]\tLoss: 0.123456'), { metrics: { loss: 0.123456 }, epoch: 3, exact: false });
    assert.deepEqual(metrics('Test set: Average loss: 0.0331, Accuracy: 9892/10000 (99%)'), { test_loss: 0.0331, test_acc: 0.9892 });
  });

  it('reads name value, name=value, name: value, percentages, and tqdm postfixes', () => {
    assert.deepEqual(metrics('loss 0.123'), { loss: 0.123 });
    assert.deepEqual(metrics('loss=0.123'), { loss: 0.123 });
    assert.deepEqual(metrics('loss: 0.123'), { loss: 0.123 });
    assert.deepEqual(parseMetricLine('Epoch 3 done in 12.1s, acc 91.2%'), { metrics: { acc: 0.912 }, epoch: 3, exact: false });
    assert.deepEqual(parseMetricLine('Epoch 2: 100%|##########| 938/938 [00:12<00:00, 75.1it/s, loss=0.123, acc=0.9]'), { metrics: { loss: 0.123, acc: 0.9 }, epoch: 2, exact: false });
    assert.deepEqual(metrics('step 120 train/loss 2.5e-01 val_loss=0.3'), { train_loss: 0.25, val_loss: 0.3 });
  });

  it('reads the printouts of other well-known scripts', () => {
    // pytorch/examples word_language_model
    assert.deepEqual(parseMetricLine('| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 45.41 | loss  7.63 | ppl  2049.78'), { metrics: { loss: 7.63, ppl: 2049.78 }, epoch: 1, exact: false });
    // pytorch/examples imagenet
    assert.deepEqual(metrics('Epoch: [0][ 10/5005]\tTime  0.238 ( 0.374)\tData  0.001 ( 0.120)\tLoss 6.9077e+00 (6.9088e+00)\tAcc@1   0.00 (  0.10)\tAcc@5   0.39 (  0.51)'), { loss: 6.9077, 'acc@1': 0, 'acc@5': 0.39 });
    // pytorch/examples dcgan
    assert.deepEqual(metrics('[0/25][0/1583] Loss_D: 1.7284 Loss_G: 5.1402 D(x): 0.5431 D(G(z)): 0.5413 / 0.0081'), { loss_d: 1.7284, loss_g: 5.1402 });
    // Hugging Face Trainer's log dict
    assert.deepEqual(parseMetricLine("{'loss': 0.6931, 'learning_rate': 4.9e-05, 'epoch': 0.01}"), { metrics: { loss: 0.6931 }, epoch: 0.01, exact: false });
  });

  it('reads ::report:: lines exactly, step and epoch apart', () => {
    assert.deepEqual(parseMetricLine('::report::{"loss": 0.42, "val_acc": 0.9, "step": 30, "note": "x"}'), { metrics: { loss: 0.42, val_acc: 0.9 }, step: 30, exact: true });
    assert.equal(parseMetricLine('::report::{"loss": '), undefined, 'a torn report is none');
  });

  it('reads nothing from lines that are no metrics', () => {
    for (const line of [
      'Namespace(batch_size=64, epochs=14, lr=1.0, gamma=0.7, loss_scale=2.0)',
      'Using device: cuda:0, torch 1.13.1',
      'Downloading http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz to ../data/MNIST/raw/train-images-idx3-ubyte.gz',
      '100%|██████████| 9912422/9912422 [00:00<00:00, 29.1MB/s]',
      'Extracting ../data/MNIST/raw/train-labels-idx1-ubyte.gz to ../data/MNIST/raw',
      '  File "/home/u/train.py", line 42, in train',
      '    acc = 100. * correct / len(test_loader.dataset)',
      '    loss = F.nll_loss(output, target)',
      'RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)',
      'Epoch 3',
      'step 100 of 2000, lr 0.01',
      'saved checkpoint to runs/loss_0.5/model.pt',
      'torch.distributed.elastic.multiprocessing.redirects: [WARNING] NOTE: Redirects are currently not supported in Windows or MacOs.',
      'WARNING:torch.distributed.run: Setting OMP_NUM_THREADS environment variable for each process to be 1',
      'loss 1.13.1',
      '',
    ]) assert.equal(parseMetricLine(line), undefined, line);
  });

  it('shows metrics for people, fractions of accuracy as percentages', () => {
    assert.equal(metricsText({ loss: 0.031234, test_acc: 0.9837, ppl: 2049.78, lr: 0.00005 }), 'loss 0.0312 · test_acc 98.37% · ppl 2049.8 · lr 5.00e-5');
  });
});
