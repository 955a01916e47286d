import * as assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../paths';

/**
 * A webview panel left open is restored after a reload only if VS Code activates the extension
 * for it: every panel type whose serializer the extension registers needs its
 * `onWebviewPanel:<viewType>` activation event (the Curves panel had none).
 */
describe('extension manifest', () => {
  it('every webview panel the extension restores has its onWebviewPanel activation event', () => {
    const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { activationEvents: string[] };
    const sources = readdirSync(join(repoRoot, 'src', 'views'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => readFileSync(join(repoRoot, 'src', 'views', f), 'utf8'));
    const viewTypes = new Map<string, string>();
    for (const text of sources) {
      const cls = /export class (\w+)[\s\S]*?static readonly viewType = '([^']+)'/g;
      for (let m = cls.exec(text); m; m = cls.exec(text)) viewTypes.set(m[1], m[2]);
    }
    const restored = sources.flatMap((text) => [...text.matchAll(/registerWebviewPanelSerializer\((\w+)\.viewType/g)].map((m) => m[1]));
    assert.ok(restored.length >= 2, `serializers found: ${restored.join(', ')}`);
    for (const cls of restored) {
      const viewType = viewTypes.get(cls);
      assert.ok(viewType, `${cls}.viewType found`);
      assert.ok(pkg.activationEvents.includes(`onWebviewPanel:${viewType}`), `onWebviewPanel:${viewType} in package.json's activationEvents`);
    }
  });
});
