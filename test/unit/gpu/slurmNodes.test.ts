import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseNodeProbe, parseSinfoNodes, readJobNodes } from '../../../src/gpu/slurmNodes';
import { querySlurmJob, sbatch } from '../../../src/training/launchers/slurm';
import { fixtures } from '../../paths';
import { useSlurmCluster } from '../../support/slurmCluster';

const fakeBin = join(fixtures, 'bin');

/** What the fake nvidia-smi prints for `scenario`, as one probe task's labelled lines would carry it. */
function probeOf(task: number, node: string, scenario: string): string {
  const env = { ...process.env, PATH: `${fakeBin}:${process.env.PATH ?? ''}`, FAKE_NVIDIA_SMI_SCENARIO: scenario };
  const run = (args: string[]) => spawnSync('nvidia-smi', args, { env, encoding: 'utf8' }).stdout;
  const gpus = run(['--query-gpu=timestamp,index,uuid,name,memory.used,memory.reserved,memory.total,utilization.gpu,temperature.gpu,power.draw,power.limit', '--format=csv,noheader,nounits']);
  const apps = run(['--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory', '--format=csv,noheader,nounits']);
  return ['@@gw-node ' + node, '@@gw-gpus', ...gpus.trim().split('\n'), '@@gw-apps', ...apps.trim().split('\n'), '@@gw-end'].map((l) => `${task}: ${l}`).join('\n');
}

describe('gpu: a Slurm job\'s nodes (the --overlap probe, sinfo)', () => {
  it('reads each node\'s GPUs and processes from interleaved labelled lines, and points out the idle GPUs', () => {
    const a = probeOf(0, 'n1', 'two-gpus').split('\n');
    const b = probeOf(1, 'n2', 'mig').split('\n');
    const mixed = a.flatMap((l, i) => [l, b[i]]).filter((l) => l !== undefined).concat(b.slice(a.length)).join('\n');
    const nodes = parseNodeProbe(mixed);
    assert.deepEqual(nodes.map((n) => [n.node, n.devices.map((d) => d.index), n.processes.length, n.idle]), [['n1', [0, 1], 2, []], ['n2', [0, 1], 2, [1]]]);
    assert.equal(nodes[0].devices[0].name, 'NVIDIA GeForce RTX 3090');
    const broken = parseNodeProbe('0: @@gw-node n3\n0: @@gw-gpus\n0: NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.\n0: @@gw-apps\n0: @@gw-end');
    assert.deepEqual(broken.map((n) => [n.node, n.devices.length, n.error]), [['n3', 0, 'NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.']]);
  });

  it('reads sinfo -N: down and drained nodes with their reason', () => {
    const nodes = parseSinfoNodes('n1|allocated|none\nn2|drained|bad gpu\nn3|down*|Not responding\nn4|mixed|none\nn1|allocated|none\n');
    assert.deepEqual(nodes.map((n) => [n.node, n.state, n.reason, n.unavailable]), [['n1', 'allocated', undefined, false], ['n2', 'drained', 'bad gpu', true], ['n3', 'down*', 'Not responding', true], ['n4', 'mixed', undefined, false]]);
  });
});

describe('gpu: a running job\'s nodes on a real two-node cluster', function () {
  this.timeout(120_000);
  const cluster = useSlurmCluster();

  it('probes both nodes of a running job with srun --overlap (the fake nvidia-smi first on PATH), and shows a drained node', async () => {
    const script = join(cluster().dir, 'hold.sh');
    writeFileSync(script, '#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:2\nsleep 300\n');
    const id = await sbatch(script, [`--output=${join(cluster().dir, 'hold-%j.out')}`]);
    for (;;) {
      const info = await querySlurmJob(id);
      if (info?.state === 'RUNNING') break;
      assert.ok(info && info.state === 'PENDING', JSON.stringify(info));
      await new Promise((r) => setTimeout(r, 100));
    }
    cluster().tool('scontrol', ['update', 'nodename=n2', 'state=drain', 'reason=bad gpu']);
    const env = { ...process.env, PATH: `${fakeBin}:${process.env.PATH ?? ''}` };
    const seen = await readJobNodes(id, 'n[1-2]', 2, env);
    assert.deepEqual(seen.nodes.map((n) => [n.node, n.devices.length, n.processes.length, n.error]), [['n1', 2, 2, undefined], ['n2', 2, 2, undefined]]);
    assert.deepEqual(seen.unavailable.map((n) => [n.node, n.state, n.reason]), [['n2', 'draining', 'bad gpu']]);
    assert.equal(seen.nodes[1].slurm?.state, 'draining');
    cluster().tool('scontrol', ['update', 'nodename=n2', 'state=resume']);
    cluster().tool('scancel', [id]);
  });
});
