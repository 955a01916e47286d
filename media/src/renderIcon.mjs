#!/usr/bin/env node
// Renders media/src/icon.svg to media/icon.png (128×128, the Marketplace icon) in Debian's
// Chromium through playwright-core, so the PNG is reproducible from the SVG that is its source.
//   node media/src/renderIcon.mjs        (CHROMIUM_PATH overrides /usr/bin/chromium)
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const svg = readFileSync(join(here, 'icon.svg'), 'utf8');
const out = join(here, '..', 'icon.png');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu'] });
try {
  const page = await browser.newPage({ viewport: { width: 128, height: 128 }, deviceScaleFactor: 1 });
  await page.setContent(`<!DOCTYPE html><html><body style="margin:0;background:transparent">${svg}</body></html>`);
  await page.locator('svg').screenshot({ path: out, omitBackground: true });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
}
