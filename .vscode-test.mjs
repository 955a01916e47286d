// The in-host suite the standard way, for a developer with VS Code installed:
//   npm run build && npx tsc -p . && npx vscode-test
// (@vscode/test-cli downloads VS Code into .vscode-test/ on first use.) CI and this repo's
// `npm test` run the same files through code-server instead, offline: see test/e2e/smoke.test.ts.
import { defineConfig } from '@vscode/test-cli';

export default defineConfig({
  label: 'inhost',
  files: 'out/test/e2e/inhost/**/*.inhost.js',
  workspaceFolder: 'test/fixtures/e2e-workspace',
  mocha: { ui: 'tdd', timeout: 20000 },
  launchArgs: ['--disable-extensions', '--disable-workspace-trust'],
});
