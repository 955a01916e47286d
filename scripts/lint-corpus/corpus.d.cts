/** Types of corpus.cjs (the real-code lint corpus: reading, validating, blob ids, cache paths). */
export interface Label {
  readonly path: string;
  /** 1-based, in the file at the project's commit. */
  readonly line: number;
  /** A finding starting anywhere in line..endLine matches. */
  readonly endLine?: number;
  readonly rule: string;
  readonly verdict: 'hazard' | 'safe' | 'ambiguous';
  readonly reason: string;
  readonly fix?: string;
}

export interface Project {
  readonly id: string;
  readonly repo: string;
  readonly commit: string;
  readonly license: string;
  /** path -> git blob sha1 at `commit`. */
  readonly files: Readonly<Record<string, string>>;
  readonly labels: readonly Label[];
}

export declare const ruleIds: readonly string[];
export declare const verdicts: readonly string[];
export declare function blobSha(bytes: Uint8Array): string;
export declare function badPath(path: unknown): string | undefined;
export declare function validateProject(value: unknown, fileName: string): string[];
export declare function readCorpus(dir: string): { projects: Project[]; problems: string[] };
export declare function corpusFolder(repoRoot: string): string;
export declare function cacheFolder(repoRoot: string, env?: Record<string, string | undefined>): string;
