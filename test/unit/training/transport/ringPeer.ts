/**
 * A ring rank in its own process, for the ring tests: joins the ring named by its arguments
 * (dir, rank, worldSize, transport), tells the parent `joined` (with the shared files it left
 * in /dev/shm), then all-reduces a buffer of ones of the length each `reduce` message gives
 * and answers with the result's first value. Never exits by itself: the tests kill it.
 */
import { readdirSync } from 'node:fs';
import { Ring, type RingTransport } from '../../../../src/training/transport/ring';

async function main(): Promise<void> {
  const [dir, rank, worldSize, transport] = process.argv.slice(2);
  const ring = await Ring.join({ dir, rank: Number(rank), worldSize: Number(worldSize), transport: transport as RingTransport, connectTimeoutMs: 5000 });
  const mine = readdirSync('/dev/shm').filter((f) => f.startsWith(`gw-ring-${process.pid}-`));
  process.on('message', (m: { reduce: number }) => {
    const data = new Float32Array(m.reduce).fill(1);
    ring.allReduceSum(data).then(() => process.send?.({ reduced: data[0] }), (err: unknown) => process.send?.({ error: String(err) }));
  });
  process.send?.({ joined: true, transport: ring.transport, files: mine });
}

main().catch((err: unknown) => {
  process.send?.({ error: String(err) });
});
