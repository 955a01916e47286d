/**
 * Runs inside a real extension host (mocha TDD), through `.vscode-test.mjs` with VS Code
 * installed, or through code-server in the e2e layer. Named *.inhost.ts so that the plain
 * Node mocha layers, which cannot load `vscode`, never pick it up.
 */
import * as assert from 'node:assert/strict';
import * as vscode from 'vscode';

const extensionId = 'gpu-workbench.gpu-workbench';

suite('GPU Workbench in the extension host', () => {
  test('activates and registers its commands', async () => {
    const ext = vscode.extensions.getExtension(extensionId);
    assert.ok(ext, `extension ${extensionId} is not loaded`);
    await ext.activate();
    assert.equal(ext.isActive, true);
    const commands = await vscode.commands.getCommands(true);
    for (const id of ['gpuWorkbench.showPanel', 'gpuWorkbench.refreshGpus']) {
      assert.ok(commands.includes(id), `command ${id} is not registered`);
    }
  });

  test('"Show GPU Panel" runs without an error', async () => {
    await vscode.commands.executeCommand('gpuWorkbench.showPanel');
  });
});
