/** A byte count for people, in MiB with one decimal: `12.3 MiB`. */
export function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}
