/**
 * Writes config values into a job file the way a user would: in an editor, as one edit that Ctrl+Z
 * takes back, left for the user to review and save. (A WorkspaceEdit counts as a refactoring, which
 * VS Code saves at once: files.refactoring.autoSave.) Used by Apply Best Config and Find Max Batch Size.
 */
import * as vscode from 'vscode';
import { ApplyConfigError, applyConfigToJson, type TextReplacement } from '../../tuning/applyConfig';
import type { Config } from '../../tuning/space';

/**
 * The keys it changed; [] when the file has these values already; undefined when it could not
 * (the file's JSON has no place for them, or VS Code refused the edit), after saying why,
 * prefixed with `title`.
 */
export async function editConfigInEditor(doc: vscode.TextDocument, config: Config, title: string): Promise<readonly string[] | undefined> {
  const shown = vscode.workspace.asRelativePath(doc.uri);
  let applied;
  try {
    applied = applyConfigToJson(doc.getText(), config, shown);
  } catch (err) {
    if (!(err instanceof ApplyConfigError)) throw err;
    void vscode.window.showErrorMessage(`${title}: ${err.message}`);
    return undefined;
  }
  if (!applied.edit) return [];
  if (!await replaceInEditor(doc, applied.edit, title)) return undefined;
  return applied.changed;
}

/** Makes `edit` in the document's editor as one undoable edit and selects what it wrote; false (after saying why) when VS Code refused it. */
export async function replaceInEditor(doc: vscode.TextDocument, edit: TextReplacement, title: string): Promise<boolean> {
  const editor = await vscode.window.showTextDocument(doc, { preview: false });
  const start = doc.positionAt(edit.offset);
  const range = new vscode.Range(start, doc.positionAt(edit.offset + edit.length));
  if (!await editor.edit((b) => b.replace(range, edit.content))) {
    void vscode.window.showErrorMessage(`${title}: VS Code refused the edit to ${vscode.workspace.asRelativePath(doc.uri)}.`);
    return false;
  }
  const end = doc.positionAt(edit.offset + edit.content.length);
  editor.selection = new vscode.Selection(start, end);
  editor.revealRange(new vscode.Range(start, end));
  return true;
}
