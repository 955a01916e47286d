/** Text for numbers the panel shows. A value the tool did not report (`null`) reads "—", never 0. */

export const missing = '—';

/** MiB as GiB with one decimal: 7270 -> "7.1". */
export function gib(mib: number | null): string {
  return mib == null ? missing : (mib / 1024).toFixed(1);
}

/** "7.1 / 24.0 GiB" */
export function memoryText(usedMiB: number | null, totalMiB: number | null): string {
  return `${gib(usedMiB)} / ${gib(totalMiB)} GiB`;
}

export function mib(value: number | null): string {
  return value == null ? `${missing} MiB` : `${Math.round(value)} MiB`;
}

/** The exact numbers behind a memory bar, for its tooltip. */
export function memoryTooltip(usedMiB: number | null, reservedMiB: number | null, totalMiB: number | null): string {
  return `${mib(usedMiB)} used · ${mib(reservedMiB)} reserved by the driver · ${mib(totalMiB)} total`;
}

export function percent(value: number | null): string {
  return value == null ? missing : `${Math.round(value)} %`;
}

export function celsius(value: number | null): string {
  return value == null ? missing : `${Math.round(value)} °C`;
}

/** "212 / 350 W", "212 W" without a limit, "— / 350 W" when the draw is unknown. */
export function power(drawW: number | null, limitW: number | null): string {
  if (drawW == null && limitW == null) return missing;
  const draw = drawW == null ? missing : Math.round(drawW).toString();
  return limitW == null ? `${draw} W` : `${draw} / ${Math.round(limitW)} W`;
}

export function clock(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}
