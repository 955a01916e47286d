/**
 * The training host: `dist/trainingHost.js`, forked by the extension so that a crash or an
 * out-of-memory error in training never takes the editor down. It runs one job at a time on
 * `host/start` and streams `JobEvent`s back over IPC; `host/cancel` stops it.
 *
 * The same bundle is the worker process: forked by the coordinator with
 * GPU_WORKBENCH_TRAINING_ROLE=worker, it runs one rank instead.
 */
import { parseHostCommand, type JobEvent } from '../job/events';
import { runJob, workerRoleEnv, type JobHandle } from './coordinator';
import { workerMain } from '../strategies/worker';

function hostMain(): void {
  let current: JobHandle | undefined;
  const post = (event: JobEvent) => {
    if (process.connected) process.send?.(event);
  };
  process.on('message', (raw: unknown) => {
    const command = parseHostCommand(raw);
    if (!command) return;
    switch (command.type) {
      case 'host/start': {
        if (current) {
          post({ type: 'job/failed', reason: 'a job is already running in this training host', hint: 'Stop it first (GPU Workbench: Stop Training).' });
          return;
        }
        const job = runJob({ file: command.file, overrides: command.overrides ?? {}, resume: command.resume === true, ...(command.runsDir ? { runsDir: command.runsDir } : {}), onEvent: post });
        current = job;
        void job.finished.then(() => { current = undefined; });
        break;
      }
      case 'host/cancel':
        current?.cancel();
        break;
      default: {
        const never: never = command;
        void never;
      }
    }
  });
  // The extension went away: stop the job so that none of its workers outlives the editor.
  process.on('disconnect', () => {
    current?.cancel();
    if (current) void current.finished.then(() => process.exit(0));
    else process.exit(0);
  });
}

if (process.env[workerRoleEnv] === 'worker') {
  void workerMain();
} else if (process.send) {
  hostMain();
} else {
  process.stderr.write('trainingHost.js is started by GPU Workbench (child_process.fork); to train from a terminal use `gpu-workbench train JOB.json`.\n');
  process.exitCode = 2;
}
