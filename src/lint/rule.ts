/** What every rule module under `src/lint/rules/` exports. */
import type { FileModel } from './model';
import type { RawFinding, Severity } from './types';

export interface Rule {
  /** Part of the interface: settings, `# noqa: <id>`, the CLI's `--select` and the docs page use it. */
  readonly id: string;
  readonly defaultSeverity: Severity;
  /** One line for rule lists. */
  readonly summary: string;
  /** The memory effect, in markdown, shown in hovers. */
  readonly explanation: string;
  readonly docsUrl: string;
  check(model: FileModel): RawFinding[];
}
