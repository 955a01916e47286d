import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The repository root, found from wherever the compiled test runs (out/test/...). */
export const repoRoot: string = (() => {
  let dir = __dirname;
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${__dirname}`);
    dir = up;
  }
  return dir;
})();

export const fixtures = join(repoRoot, 'test', 'fixtures');
