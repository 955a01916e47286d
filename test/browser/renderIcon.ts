/**
 * Renders media/icon.svg to media/icon.png (128×128, the Marketplace icon) in the same Chromium
 * the browser tests use, so the PNG is reproducible from the SVG that is its source. Not a test:
 *   npx tsc -p . && node out/test/browser/renderIcon.js
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../paths';
import { launchChromium } from './harness';

async function main(): Promise<void> {
  const svg = readFileSync(join(repoRoot, 'media', 'icon.svg'), 'utf8');
  const out = join(repoRoot, 'media', 'icon.png');
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 128, height: 128 }, deviceScaleFactor: 1 });
    await page.setContent(`<!DOCTYPE html><html><body style="margin:0;background:transparent">${svg}</body></html>`);
    await page.locator('svg').screenshot({ path: out, omitBackground: true });
    console.log(`wrote ${out}`);
  } finally {
    await browser.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
