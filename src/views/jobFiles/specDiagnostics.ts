/**
 * Errors, not warnings, in open job files and tune specs: VS Code's JSON support (the
 * `jsonValidation` in package.json, kept for completion and hover) shows schema problems as
 * warnings, while Start Training and Tune Hyperparameters refuse the file. This publishes what the
 * refusal would say as Error diagnostics, from the same validators (see specProblems.ts).
 */
import * as vscode from 'vscode';
import { log } from '../../log';
import { documentSpecKind, specProblems } from './specProblems';

/** Re-checks a document this long after the last keystroke. */
const settleMs = 250;

export function registerSpecDiagnostics(context: vscode.ExtensionContext): void {
  const collection = vscode.languages.createDiagnosticCollection('gpuWorkbench.spec');
  const pending = new Map<string, NodeJS.Timeout>();

  const check = (doc: vscode.TextDocument): void => {
    const kind = documentSpecKind(doc.uri);
    if (!kind) return;
    try {
      collection.set(doc.uri, specProblems(doc.getText(), doc.uri.fsPath, kind).map((p) => {
        const range = new vscode.Range(doc.positionAt(p.offset), doc.positionAt(p.offset + p.length));
        const d = new vscode.Diagnostic(range, p.message, vscode.DiagnosticSeverity.Error);
        d.source = 'GPU Workbench';
        return d;
      }));
    } catch (err) {
      log.warn(`could not check ${doc.uri.fsPath}: ${String(err)}`);
    }
  };
  const later = (doc: vscode.TextDocument): void => {
    // Every edit of every document (Python files, output channels) comes here: no timer for those.
    if (!documentSpecKind(doc.uri)) return;
    const key = doc.uri.toString();
    clearTimeout(pending.get(key));
    pending.set(key, setTimeout(() => {
      pending.delete(key);
      check(doc);
    }, settleMs));
  };

  // A job names its model and data files, a tune spec its trial's job: "X does not exist" has to
  // go away when X is created (and come back when it is deleted) without a keystroke in the spec.
  // Open specs are few; a burst of file events (a git checkout) re-checks each once, debounced.
  const recheckOpen = (): void => {
    for (const doc of vscode.workspace.textDocuments) later(doc);
  };
  const files = vscode.workspace.createFileSystemWatcher('**/*', false, true, false);

  context.subscriptions.push(
    collection,
    files,
    files.onDidCreate(recheckOpen),
    files.onDidDelete(recheckOpen),
    vscode.workspace.onDidOpenTextDocument(check),
    vscode.workspace.onDidChangeTextDocument((e) => later(e.document)),
    vscode.workspace.onDidCloseTextDocument((doc) => {
      clearTimeout(pending.get(doc.uri.toString()));
      pending.delete(doc.uri.toString());
      collection.delete(doc.uri);
    }),
    { dispose: () => { for (const t of pending.values()) clearTimeout(t); pending.clear(); } },
  );
  for (const doc of vscode.workspace.textDocuments) check(doc);
}
