/** A byte count for people, in MiB with one decimal: `12.3 MiB`. */
export function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** `n` bytes in the largest binary unit it reaches (up to TiB): [value, unit]. */
function binaryUnit(n: number): [number, string] {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return [v, units[u]];
}

/** `1.5 GiB`, `312.4 MiB`: one decimal (whole bytes below 1 KiB). */
export function formatBytes(n: number): string {
  const [v, unit] = binaryUnit(n);
  return unit === 'B' ? `${n} B` : `${v.toFixed(1)} ${unit}`;
}

/** `9.3 KiB`, `1.25 GiB`: three significant digits. */
export function bytesText(n: number): string {
  const [v, unit] = binaryUnit(n);
  return unit === 'B' ? `${v} B` : `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)} ${unit}`;
}
