/** What every subcommand of `gpu-workbench` shares about its command line. */

/** A command line that cannot be understood: said on stderr with the command's usage, exit code 2. */
export class UsageError extends Error {}

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
