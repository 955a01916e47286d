/**
 * The OOM-hints language server: diagnostics, hovers and quick fixes from the lint engine.
 * Runs over stdio or IPC (`--stdio` / `--node-ipc`, picked by vscode-languageserver).
 *
 * Diagnostics are pulled when the client supports it (VS Code does) and pushed, debounced,
 * otherwise. Settings are read per document from `workspace/configuration` and cached until
 * they change. The workspace folders' Python files are indexed in the background so that a
 * guard in a caller in another file counts. No handler lets an exception escape: a file the
 * engine cannot read gets no findings, never a dead server.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  CodeAction,
  CodeActionKind,
  DiagnosticSeverity,
  DidChangeConfigurationNotification,
  DocumentDiagnosticReportKind,
  ProposedFeatures,
  TextDocumentSyncKind,
  TextDocuments,
  createConnection,
  type CodeActionParams,
  type Diagnostic,
  type DocumentDiagnosticReport,
  type Hover,
  type InitializeParams,
  type InitializeResult,
  type TextEdit,
} from 'vscode-languageserver/node';
import { TextDocument } from 'vscode-languageserver-textdocument';
import { diffEdit } from '../lint/parser';
import { walkPython } from '../lint/files';
import { createLinter, defaultLimits, isBinarySource, type Linter } from '../lint/linter';
import { severities, type Finding, type LintOptions, type Severity } from '../lint/types';

export const fixAllKind = 'source.fixAll.gpuWorkbench';
const source = 'GPU Workbench';
const maxIndexedFiles = 5000;
const pushDelayMs = 250;

/** `gpuWorkbench.lint.*` as the server reads it; anything malformed falls back to the default. */
interface LintSettings {
  readonly enabled: boolean;
  readonly rules: Record<string, Severity | 'off'>;
}
const defaultSettings: LintSettings = { enabled: true, rules: {} };

/** `gpuWorkbench.lint.maxFileSize` in KB (1,024 characters): larger files are skipped with a note. */
function parseMaxFileSize(value: unknown): number {
  const kb = typeof value === 'object' && value !== null ? (value as { maxFileSize?: unknown }).maxFileSize : undefined;
  return typeof kb === 'number' && Number.isFinite(kb) && kb > 0 ? kb : defaultLimits.maxChars / 1024;
}

function parseSettings(value: unknown): LintSettings {
  if (typeof value !== 'object' || value === null) return defaultSettings;
  const v = value as { enabled?: unknown; rules?: unknown };
  const rules: Record<string, Severity | 'off'> = {};
  if (typeof v.rules === 'object' && v.rules !== null) {
    for (const [id, level] of Object.entries(v.rules as Record<string, unknown>)) {
      if (level === 'off' || (typeof level === 'string' && (severities as readonly string[]).includes(level))) rules[id] = level as Severity | 'off';
    }
  }
  return { enabled: typeof v.enabled === 'boolean' ? v.enabled : true, rules };
}

const toLspSeverity: Record<Severity, DiagnosticSeverity> = {
  error: DiagnosticSeverity.Error,
  warning: DiagnosticSeverity.Warning,
  info: DiagnosticSeverity.Information,
  hint: DiagnosticSeverity.Hint,
};

/** The linter's key for a document: a file path for file: URIs, the URI itself otherwise (untitled). */
function pathOf(uri: string): string {
  if (uri.startsWith('file:')) {
    try {
      return fileURLToPath(uri);
    } catch {
      return uri;
    }
  }
  return uri;
}


/** Puts a file's text in the linter's index, or takes the file out when the text is binary (see isBinarySource). */
function index(l: Linter, path: string, text: string): void {
  if (isBinarySource(text)) l.removeFile(path);
  else l.setFile(path, text);
}

function toDiagnostic(f: Finding): Diagnostic {
  return { range: f.range, severity: toLspSeverity[f.severity], code: f.ruleId, codeDescription: { href: f.docsUrl }, source, message: f.message };
}

/** The document's diagnostics: its findings, or one note at the top when the engine skipped it as too large. */
function diagnosticsOf(doc: TextDocument, findings: readonly Finding[]): Diagnostic[] {
  const skipped = linter?.skipReason(pathOf(doc.uri));
  if (!skipped) return findings.map(toDiagnostic);
  const raise = /over the limit of [\d,]+ \(/.test(skipped) ? '; raise `gpuWorkbench.lint.maxFileSize` to check it' : '';
  return [{ range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } }, severity: DiagnosticSeverity.Information, code: 'file-skipped', source, message: `OOM hints skipped this file: ${skipped}${raise}.` }];
}

/** Reads `gpuWorkbench.lint.maxFileSize` (window-wide) into the engine's limits. */
async function applyLimits(l: Linter): Promise<void> {
  let value: unknown;
  if (configurationSupport) value = await connection.workspace.getConfiguration({ section: 'gpuWorkbench.lint' }).catch(() => undefined);
  l.setLimits({ maxChars: Math.round(parseMaxFileSize(value) * 1024) });
}

const connection = createConnection(ProposedFeatures.all);
const documents = new TextDocuments(TextDocument);
let linter: Linter | undefined;
const linterReady: Promise<Linter> = createLinter({ incremental: true, onError: (path, err) => connection.console.error(`lint engine error in ${path}: ${err instanceof Error ? err.stack ?? err.message : String(err)}`) }).then((l) => (linter = l));
let pullDiagnostics = false;
let configurationSupport = false;
let dynamicConfiguration = false;
let othersTimer: NodeJS.Timeout | undefined;
let workspaceFolders: string[] = [];
const settingsCache = new Map<string, Promise<LintSettings>>();
/** Findings per document version, shared by diagnostics, hovers and code actions. */
const findingsCache = new Map<string, { version: number; findings: Finding[] }>();
const pushTimers = new Map<string, NodeJS.Timeout>();

function settingsFor(uri: string): Promise<LintSettings> {
  if (!configurationSupport) return Promise.resolve(defaultSettings);
  let s = settingsCache.get(uri);
  if (!s) {
    s = connection.workspace.getConfiguration({ scopeUri: uri, section: 'gpuWorkbench.lint' }).then(parseSettings, () => defaultSettings);
    settingsCache.set(uri, s);
  }
  return s;
}

/** The size limit from the settings, read once and again when they change; every lint waits for it. */
let limitsApplied: Promise<void> | undefined;

/** The lint under way per document (its version, and the settings epoch): a second request for it waits for the same one. */
const linting = new Map<string, { version: number; epoch: number; done: Promise<Finding[] | undefined> }>();
/** Bumped when every document's findings go stale (settings, other files): a lint begun before is not kept. */
let epoch = 0;

/**
 * The document's findings. A long lint gives way to other requests (Linter.lintFileAsync) and
 * stops when the document changes, the settings change or another file is indexed meanwhile:
 * then the current text of the document is linted with the current settings (an edited
 * document's findings are for its latest version; a closed one has none).
 */
async function findingsFor(doc: TextDocument): Promise<Finding[]> {
  const l = await linterReady;
  for (let current: TextDocument | undefined = doc; current; current = documents.get(doc.uri)) {
    const settings = await settingsFor(current.uri);
    await (limitsApplied ??= applyLimits(l));
    const cached = findingsCache.get(current.uri);
    if (cached && cached.version === current.version) return cached.findings;
    let run = linting.get(current.uri);
    if (!run || run.version !== current.version || run.epoch !== epoch) {
      const mine = { version: current.version, epoch, done: lintNow(l, current, { enabled: settings.enabled, rules: settings.rules }) };
      linting.set(current.uri, mine);
      void mine.done.finally(() => {
        if (linting.get(doc.uri) === mine) linting.delete(doc.uri);
      });
      run = mine;
    }
    const findings = await run.done;
    if (findings) return findings;
  }
  return [];
}

/**
 * Lints one version of a document and caches its findings; undefined when, before it finished,
 * the document changed or closed, the settings changed, or another file was indexed.
 */
async function lintNow(l: Linter, doc: TextDocument, options: LintOptions): Promise<Finding[] | undefined> {
  const begun = epoch;
  const stale = (): boolean => documents.get(doc.uri)?.version !== doc.version || epoch !== begun;
  let findings: Finding[] | undefined = [];
  try {
    const text = doc.getText();
    if (!isBinarySource(text)) findings = await l.lintFileAsync(pathOf(doc.uri), text, options, stale);
  } catch (err) {
    connection.console.error(`linting ${doc.uri} failed: ${String(err)}`);
  }
  if (epoch !== begun) return undefined;
  if (findings && !stale()) findingsCache.set(doc.uri, { version: doc.version, findings });
  return findings;
}

function invalidateAll(): void {
  epoch++;
  findingsCache.clear();
  if (pullDiagnostics) void connection.languages.diagnostics.refresh().catch(() => undefined);
  else for (const doc of documents.all()) schedulePush(doc);
}

function schedulePush(doc: TextDocument): void {
  if (pullDiagnostics) return;
  clearTimeout(pushTimers.get(doc.uri));
  pushTimers.set(doc.uri, setTimeout(() => {
    pushTimers.delete(doc.uri);
    const current = documents.get(doc.uri);
    if (!current) return;
    void findingsFor(current).then((findings) => {
      // Closed or changed while it was linting (the settings are a round trip to the client): a
      // closed file must keep no hints, and a changed one has its own push coming.
      if (documents.get(current.uri)?.version !== current.version) return;
      return connection.sendDiagnostics({ uri: current.uri, version: current.version, diagnostics: diagnosticsOf(current, findings) });
    });
  }, pushDelayMs));
}

connection.onInitialize((params: InitializeParams): InitializeResult => {
  pullDiagnostics = !!params.capabilities.textDocument?.diagnostic;
  configurationSupport = !!params.capabilities.workspace?.configuration;
  dynamicConfiguration = !!params.capabilities.workspace?.didChangeConfiguration?.dynamicRegistration;
  workspaceFolders = (params.workspaceFolders ?? []).map((f) => pathOf(f.uri)).filter((p) => !p.includes(':') || p.startsWith('/') || /^[A-Za-z]:/.test(p));
  return {
    capabilities: {
      textDocumentSync: TextDocumentSyncKind.Incremental,
      hoverProvider: true,
      codeActionProvider: { codeActionKinds: [CodeActionKind.QuickFix, fixAllKind], resolveProvider: false },
      ...(pullDiagnostics ? { diagnosticProvider: { identifier: 'gpuWorkbench', interFileDependencies: true, workspaceDiagnostics: false } } : {}),
    },
    serverInfo: { name: 'gpu-workbench-lint' },
  };
});

connection.onInitialized(() => {
  if (dynamicConfiguration) void connection.client.register(DidChangeConfigurationNotification.type, undefined).catch(() => undefined);
  void indexWorkspace();
});

/** Parses the workspace folders' Python files (not the open ones) into the index, yielding between files. */
async function indexWorkspace(): Promise<void> {
  const l = await linterReady;
  await (limitsApplied ??= applyLimits(l));
  const files: string[] = [];
  for (const folder of workspaceFolders) walkPython(folder, files, maxIndexedFiles);
  let added = 0;
  for (const path of files) {
    if (documents.get(pathToFileURL(path).href)) continue;
    try {
      index(l, path, await readFile(path, 'utf8'));
      added++;
    } catch {
      // Unreadable: simply not part of the index.
    }
    await new Promise((r) => setImmediate(r));
  }
  connection.console.info(`indexed ${added} Python files`);
  if (added) invalidateAll();
}

connection.onDidChangeConfiguration(async () => {
  settingsCache.clear();
  if (linter) await (limitsApplied = applyLimits(linter));
  invalidateAll();
});

connection.onDidChangeWatchedFiles(async (params) => {
  const l = await linterReady;
  for (const change of params.changes) {
    if (documents.get(change.uri)) continue; // the editor's text wins over the disk's
    const path = pathOf(change.uri);
    if (change.type === 3) l.removeFile(path);
    else {
      try {
        index(l, path, await readFile(path, 'utf8'));
      } catch {
        l.removeFile(path);
      }
    }
  }
  invalidateAll();
});

documents.onDidChangeContent((e) => {
  // Index the new text now (an incremental parse): other documents' findings may depend on it.
  if (linter) index(linter, pathOf(e.document.uri), e.document.getText());
  schedulePush(e.document);
  clearTimeout(othersTimer);
  othersTimer = setTimeout(() => {
    for (const uri of findingsCache.keys()) if (uri !== e.document.uri) findingsCache.delete(uri);
    if (pullDiagnostics) void connection.languages.diagnostics.refresh().catch(() => undefined);
    else for (const doc of documents.all()) if (doc.uri !== e.document.uri) schedulePush(doc);
  }, 2 * pushDelayMs);
});

documents.onDidClose((e) => {
  findingsCache.delete(e.document.uri);
  settingsCache.delete(e.document.uri);
  clearTimeout(pushTimers.get(e.document.uri));
  pushTimers.delete(e.document.uri);
  if (!pullDiagnostics) void connection.sendDiagnostics({ uri: e.document.uri, diagnostics: [] });
  // An untitled document is gone; a file stays in the index with what is on disk.
  const path = pathOf(e.document.uri);
  if (!e.document.uri.startsWith('file:')) linter?.removeFile(path);
  else void readFile(path, 'utf8').then((text) => linter && index(linter, path, text), () => linter?.removeFile(path));
});

connection.languages.diagnostics.on(async (params): Promise<DocumentDiagnosticReport> => {
  const doc = documents.get(params.textDocument.uri);
  if (!doc) return { kind: DocumentDiagnosticReportKind.Full, items: [] };
  try {
    const findings = await findingsFor(doc);
    return { kind: DocumentDiagnosticReportKind.Full, items: diagnosticsOf(doc, findings) };
  } catch (err) {
    connection.console.error(`diagnostics for ${doc.uri} failed: ${String(err)}`);
    return { kind: DocumentDiagnosticReportKind.Full, items: [] };
  }
});

connection.onHover(async (params): Promise<Hover | null> => {
  const doc = documents.get(params.textDocument.uri);
  if (!doc) return null;
  const { line, character } = params.position;
  const inside = (f: Finding) =>
    (f.range.start.line < line || (f.range.start.line === line && f.range.start.character <= character)) &&
    (f.range.end.line > line || (f.range.end.line === line && f.range.end.character >= character));
  const hits = (await findingsFor(doc)).filter(inside);
  if (hits.length === 0) return null;
  const value = hits.map((f) => `**${f.ruleId}** — ${f.message}\n\n${f.explanation}\n\n[Read more about ${f.ruleId}](${f.docsUrl})`).join('\n\n---\n\n');
  return { contents: { kind: 'markdown', value }, range: hits[0].range };
});

const sameRange = (a: Diagnostic['range'], b: Diagnostic['range']) =>
  a.start.line === b.start.line && a.start.character === b.start.character && a.end.line === b.end.line && a.end.character === b.end.character;

connection.onCodeAction(async (params: CodeActionParams): Promise<CodeAction[]> => {
  const doc = documents.get(params.textDocument.uri);
  if (!doc) return [];
  try {
    const findings = await findingsFor(doc);
    const only = params.context.only;
    const wants = (kind: string) => !only || only.some((k) => kind === k || kind.startsWith(`${k}.`));
    const actions: CodeAction[] = [];
    if (wants(CodeActionKind.QuickFix)) {
      for (const d of params.context.diagnostics) {
        if (d.source !== source) continue;
        const f = findings.find((x) => x.ruleId === d.code && sameRange(x.range, d.range));
        f?.fixes.forEach((fix, i) => {
          const action = CodeAction.create(fix.title, { changes: { [doc.uri]: fix.edits.map((e) => ({ range: e.range, newText: e.newText })) } }, CodeActionKind.QuickFix);
          action.diagnostics = [d];
          action.isPreferred = i === 0;
          actions.push(action);
        });
      }
    }
    if (wants(CodeActionKind.QuickFix)) {
      // An out-of-memory problem of a torchrun job (the extension's diagnostics, passed along in the context):
      // the training step's forward and loss under torch.autocast, where that step is unambiguous; shown as a
      // preview first (a change annotation that needs confirmation).
      const oom = params.context.diagnostics.find((d) => d.source === source && (d.code === 'cuda-oom' || d.code === 'oom-memory'));
      const fix = oom && (await linterReady).autocastFix(pathOf(doc.uri), doc.getText());
      if (oom && fix) {
        const eol = doc.getText().includes('\r\n') ? '\r\n' : '\n';
        const annotation = 'gpuWorkbench.autocast';
        const action = CodeAction.create('Run the forward pass and the loss under torch.autocast (bf16): about half the activation memory', {
          documentChanges: [{ textDocument: { uri: doc.uri, version: doc.version }, edits: [{ range: fix.range, newText: fix.newText.replace(/\n/g, eol), annotationId: annotation }] }],
          changeAnnotations: { [annotation]: { label: 'torch.autocast around the training step', description: 'bf16 needs no GradScaler; parameters, gradients and optimizer state stay fp32', needsConfirmation: true } },
        }, CodeActionKind.QuickFix);
        action.diagnostics = [oom];
        actions.push(action);
      }
    }
    if (wants(fixAllKind) && findings.some((f) => f.fixes.length > 0) && (only || actions.length > 0)) {
      const edit = await fixAllEdit(doc);
      if (edit) actions.push(CodeAction.create('Fix all GPU-memory hazards', { changes: { [doc.uri]: [edit] } }, fixAllKind));
    }
    return actions;
  } catch (err) {
    connection.console.error(`code actions for ${doc.uri} failed: ${String(err)}`);
    return [];
  }
});

/** One edit covering what fix-all changes, computed on the index and then undone there. */
async function fixAllEdit(doc: TextDocument): Promise<TextEdit | undefined> {
  const l = await linterReady;
  const settings = await settingsFor(doc.uri);
  const path = pathOf(doc.uri);
  const text = doc.getText();
  const fixed = l.fixFile(path, text, { enabled: settings.enabled, rules: settings.rules });
  l.setFile(path, text);
  if (fixed === text) return undefined;
  const e = diffEdit(text, fixed);
  return { range: { start: doc.positionAt(e.startIndex), end: doc.positionAt(e.oldEndIndex) }, newText: fixed.slice(e.startIndex, e.newEndIndex) };
}

connection.onShutdown(() => {
  for (const t of pushTimers.values()) clearTimeout(t);
  clearTimeout(othersTimer);
  linter?.dispose();
  linter = undefined;
});

process.on('uncaughtException', (err) => connection.console.error(`uncaught: ${err.stack ?? err.message}`));

documents.listen(connection);
connection.listen();
