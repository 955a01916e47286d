/** What every subcommand of `gpu-workbench` shares about its command line. */

/** A command line that cannot be understood: said on stderr with the command's usage, exit code 2. */
export class UsageError extends Error {}

/** One argument of a command line: `--name=value` or `--name value` alike, through `value()`. */
export interface CommandLineArg {
  /** The argument as given. */
  readonly arg: string;
  /** The option's name (`--steps` of `--steps=3`), or the argument itself. */
  readonly name: string;
  /** The option's value: after `=`, else the next argument (which is then consumed); a UsageError when there is none. */
  readonly value: () => string;
}

/** The arguments of `argv` in order; an option's `value()` takes the next one out of the sequence. */
export function* commandLineArgs(argv: readonly string[]): Generator<CommandLineArg> {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    yield {
      arg,
      name,
      value: () => {
        if (eq > 0) return arg.slice(eq + 1);
        const v = argv[i + 1];
        if (v === undefined || v.startsWith('--')) throw new UsageError(`${name} needs a value`);
        i++;
        return v;
      },
    };
  }
}

/** An option's value as a whole number of at least `min`; a UsageError naming the option otherwise. */
export function wholeNumber(text: string, name: string, min = 0): number {
  if (!/^\d+$/.test(text) || Number(text) < min) {
    throw new UsageError(`${name} expects a whole number${min > 0 ? ` of at least ${min}` : ''}, got '${text}'`);
  }
  return Number(text);
}

/**
 * Runs a subcommand's argument parser: its options, or the exit code when there is nothing to
 * run — 0 after printing the help (`--help`), 2 after printing what was wrong and the help.
 * Errors other than `UsageError` are the command's own and pass through.
 */
export function parseCommandLine<O>(command: string, help: string, parse: () => O | 'help'): O | number {
  let o: O | 'help';
  try {
    o = parse();
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`gpu-workbench ${command}: ${err.message}\n\n${help}\n`);
    return 2;
  }
  if (o === 'help') {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  return o;
}
