import type { Page } from 'playwright-core';

export interface Hovered {
  readonly x: number;
  readonly y: number;
  readonly text: string;
}

/**
 * Moves the pointer down a chart's plot at `at` of its width (a page's pixels), every 3 px, and
 * returns each tooltip shown on the way with where: the lines' pixels are the chart's business,
 * so a test finds a line the way a user does, by pointing at it.
 */
export async function hoverScan(page: Page, chart: string, at = 0.5): Promise<Hovered[]> {
  const box = await page.locator(`${chart} .u-over`).boundingBox();
  if (!box) throw new Error(`${chart} has no plot`);
  const tip = page.locator(`${chart} .chart-tooltip`);
  const x = box.x + box.width * at;
  const out: Hovered[] = [];
  for (let y = box.y + 1; y < box.y + box.height; y += 3) {
    await page.mouse.move(x, y);
    if (await tip.isVisible()) out.push({ x, y, text: (await tip.textContent()) ?? '' });
  }
  return out;
}
