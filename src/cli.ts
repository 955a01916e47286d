/**
 * `gpu-workbench` — the headless front door to the engines, for terminals, CI and hooks.
 * Each subcommand lives in `src/cli/<name>.ts` and exports `run(argv): Promise<number>`
 * (the exit code); this file only dispatches.
 */
import { run as gpus } from './cli/gpus';
import { run as train } from './cli/train';
import { createLinter } from './lint/linter';
import { run as lint } from './cli/lint';
import { run as tune } from './cli/tune';
import { run as doctor } from './cli/doctor';

type Command = { readonly summary: string; readonly run: (argv: string[]) => Promise<number> };

const commands: Record<string, Command> = {
  gpus: { summary: 'show memory, utilisation and processes per GPU (--json, --watch)', run: gpus },
  train: { summary: 'run a training job (single, dp, ddp, pipeline, torchrun) from a *.job.json file (--json, --resume, --find-batch-size)', run: (argv) => train(argv, { createLinter }) },
  lint: { summary: 'find GPU-memory hazards in PyTorch code (--format json, --select, --ignore, --fix)', run: lint },
  tune: { summary: 'search hyperparameters: grid, random, TPE or GP search with ASHA (--json, --resume)', run: tune },
  doctor: { summary: 'check what this machine offers for training: driver, Vulkan adapters, backends, Python/torch, a short run per GPU (--json)', run: doctor },
};

function usage(): string {
  const rows = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(8)} ${c.summary}`);
  return ['usage: gpu-workbench <command> [options]', '', 'commands:', ...rows, '', 'Run `gpu-workbench <command> --help` for its options.'].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(`${usage()}\n`);
    return name === undefined ? 2 : 0;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`gpu-workbench: unknown command '${name}'\n\n${usage()}\n`);
    return 2;
  }
  return command.run(rest);
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (err: unknown) => {
    process.stderr.write(`gpu-workbench: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
