/**
 * The PyTorch-first way in, on a `.py` file (explorer, editor title, palette):
 * - "Run with torchrun…": asks the processes (the GPUs the monitor sees, else a count of CPU
 *   processes) and the interpreter (each Python with what its torch says), writes a torchrun job
 *   next to the script (`train.py` → `train.job.json`; an existing one is never overwritten
 *   without asking) and runs it as the usual torchrun task;
 * - "Create Tune Spec for Script…": a tune spec next to the script whose trials run it with
 *   `--lr` and `--batch-size`.
 * Both run the workspace's code (the interpreter probe imports torch; the job runs the script),
 * so they refuse in an untrusted workspace; the `when` clauses hide them there too.
 * The texts and paths are in `scriptJobs.ts`.
 */
import { existsSync } from 'node:fs';
import * as vscode from 'vscode';
import { checkPythons, exec, pythonCandidates } from '../../doctor/checks';
import { interpreterItems, isPythonScript, scriptStem, torchrunJobPath, torchrunJobText, tuneSpecPath, tuneSpecText, type InterpreterItem } from './scriptJobs';
import type { InterpreterChoice } from './torchrunFormat';

export interface ScriptCommandDeps {
  readonly channel: vscode.LogOutputChannel;
  /** The processes for the job: GPU indices, a count of CPU processes, or undefined (cancelled). */
  pickProcesses(scriptName: string): Promise<number | number[] | undefined>;
  /** The interpreter the editor would choose for a job without "python" (setting, Python extension, python3). */
  defaultInterpreter(): Promise<InterpreterChoice>;
  /** GPUs nvidia-smi lists (for what the interpreter pick says of each torch). */
  gpuCount(): number;
  /** Runs a torchrun job file as a task. */
  runJob(file: string): Promise<void>;
}

const untrusted = 'GPU Workbench cannot run a script in an untrusted workspace: torchrun runs the workspace\'s Python code. Trust the workspace first (Workspaces: Manage Workspace Trust).';

/** The script: the explorer's or editor title's file, else the active editor's Python file, else one picked in a dialog. */
async function scriptOf(arg: unknown, title: string): Promise<string | undefined> {
  if (arg instanceof vscode.Uri && arg.scheme === 'file' && isPythonScript(arg.fsPath)) return arg.fsPath;
  const doc = vscode.window.activeTextEditor?.document;
  if (doc && doc.uri.scheme === 'file' && isPythonScript(doc.uri.fsPath)) {
    if (doc.isDirty) await doc.save();
    return doc.uri.fsPath;
  }
  const picked = await vscode.window.showOpenDialog({ title, filters: { 'Python scripts': ['py'] }, canSelectMany: false, defaultUri: vscode.workspace.workspaceFolders?.[0]?.uri });
  return picked?.[0]?.fsPath;
}

/** The interpreter: a pick of every Python found (the chosen one and those on PATH), those with torch first; or Browse…. */
async function pickInterpreter(deps: ScriptCommandDeps, title: string): Promise<string | undefined> {
  type Item = vscode.QuickPickItem & { python?: string; browse?: true };
  const items = (async (): Promise<Item[]> => {
    const chosen = await deps.defaultInterpreter();
    const candidates = pythonCandidates(chosen.python);
    const checks = await checkPythons(exec, candidates, deps.gpuCount(), 30_000);
    const found: InterpreterItem[] = interpreterItems(chosen, candidates, checks);
    return [...found.map((i) => ({ label: i.label, description: i.description, detail: i.detail, python: i.python })), { label: '', kind: vscode.QuickPickItemKind.Separator }, { label: '$(folder-opened) Browse…', description: 'another interpreter', browse: true }];
  })();
  const picked = await vscode.window.showQuickPick(items, { title, placeHolder: 'The Python interpreter that has PyTorch (written into the job as "python")', matchOnDescription: true });
  if (!picked) return undefined;
  if (!picked.browse) return picked.python;
  const file = await vscode.window.showOpenDialog({ title: 'Python interpreter', canSelectMany: false });
  return file?.[0]?.fsPath;
}

/** Whether to write `file`: yes when it does not exist; else the user's answer, or what they would rather do. */
async function askOverwrite(file: string, other: string): Promise<'write' | 'other' | undefined> {
  if (!existsSync(file)) return 'write';
  const overwrite = 'Overwrite';
  const answer = await vscode.window.showWarningMessage(`${vscode.workspace.asRelativePath(file)} exists already.`, { modal: true, detail: `${other}: keep the file as it is. Overwrite: replace it with a new one from your answers.` }, other, overwrite);
  return answer === overwrite ? 'write' : answer === other ? 'other' : undefined;
}

/** "Run with torchrun…": see the file's comment. */
export async function runWithTorchrun(arg: unknown, deps: ScriptCommandDeps): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showErrorMessage(untrusted);
    return;
  }
  const script = await scriptOf(arg, 'Run with torchrun: the PyTorch script');
  if (!script) return;
  const jobFile = torchrunJobPath(script);
  const decision = await askOverwrite(jobFile, 'Run It');
  if (decision === undefined) return;
  if (decision === 'write') {
    const processes = await deps.pickProcesses(scriptStem(script));
    if (processes === undefined) return;
    const python = await pickInterpreter(deps, `Run with torchrun (2/2): interpreter for ${scriptStem(script)}`);
    if (!python) return;
    await vscode.workspace.fs.writeFile(vscode.Uri.file(jobFile), Buffer.from(torchrunJobText({ script, processes, python }), 'utf8'));
    deps.channel.info(`wrote ${vscode.workspace.asRelativePath(jobFile)}: torchrun ${scriptStem(script)}.py on ${typeof processes === 'number' ? `${processes} CPU process${processes === 1 ? '' : 'es'}` : `GPU ${processes.join(', ')}`} with ${python}`);
    await vscode.window.showTextDocument(vscode.Uri.file(jobFile), { preview: false, preserveFocus: true });
  }
  await deps.runJob(jobFile);
}

/** "Create Tune Spec for Script…": a tune spec next to the script, opened, with the way on to Tune Hyperparameters…. */
export async function createTuneSpec(arg: unknown, deps: ScriptCommandDeps): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showErrorMessage(untrusted.replace('run a script', 'create a tune spec').replace('torchrun runs', 'its interpreter check and its trials run'));
    return;
  }
  const script = await scriptOf(arg, 'Create Tune Spec: the PyTorch script its trials run');
  if (!script) return;
  const file = tuneSpecPath(script);
  const uri = vscode.Uri.file(file);
  const decision = await askOverwrite(file, 'Open It');
  if (decision === undefined) return;
  if (decision === 'write') {
    const python = await pickInterpreter(deps, `Create Tune Spec: interpreter for ${scriptStem(script)}`);
    if (!python) return;
    await vscode.workspace.fs.writeFile(uri, Buffer.from(tuneSpecText(script, python), 'utf8'));
    deps.channel.info(`wrote ${vscode.workspace.asRelativePath(file)}: a tune spec over ${scriptStem(script)}.py`);
  }
  await vscode.window.showTextDocument(uri, { preview: false });
  const tune = 'Tune Now';
  const answer = await vscode.window.showInformationMessage(
    `${vscode.workspace.asRelativePath(file)}: each trial runs ${scriptStem(script)}.py with --lr and --batch-size (rename them to your script's arguments) and reads the lines it prints as print("::report::" + json.dumps({"loss": loss})).`,
    tune,
  );
  if (answer === tune) await vscode.commands.executeCommand('gpuWorkbench.tune', uri);
}

/** The walkthrough of package.json's `contributes.walkthroughs` (publisher.name#id). */
export const walkthroughId = 'gpu-workbench.gpu-workbench#gettingStarted';

/** "GPU Workbench: Get Started": opens the walkthrough (see your GPUs, the hints, torchrun, tuning). */
export async function openWalkthrough(): Promise<void> {
  await vscode.commands.executeCommand('workbench.action.openWalkthrough', walkthroughId, false);
}
