/**
 * Entry of the in-host suite for the code-server route (test/e2e/smoke.test.ts): the workbench
 * page reads `extensionTestsPath` from its `payload` query, loads this file in the extension host
 * and calls `run()`; a rejection makes the page report exit code 1. (`.vscode-test.mjs` runs the
 * same *.inhost.js files with @vscode/test-cli's own runner.)
 */
import Mocha from 'mocha';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

export async function run(): Promise<void> {
  const mocha = new Mocha({ ui: 'tdd', color: false, timeout: 20_000, reporter: 'spec' });
  for (const f of readdirSync(__dirname).filter((n) => n.endsWith('.inhost.js')).sort()) mocha.addFile(join(__dirname, f));
  await new Promise<void>((resolve, reject) => {
    mocha.run((failures) => (failures > 0 ? reject(new Error(`${failures} in-host test(s) failed`)) : resolve()));
  });
}
