#!/usr/bin/env python3
"""A stand-in for a training script, for trying `gpu-workbench tune` without a GPU.

The "model" is a noisy quadratic: its loss falls towards a floor set by the learning rate
(best near 3e-3), the batch size and the optimizer, faster with a larger learning rate.
It prints one `::report::{"loss": ...}` line per epoch, which is all a trial has to do.
Standard library only.
"""
import argparse
import json
import math
import os
import random
import time
import zlib


def report(**metrics):
    print("::report::" + json.dumps(metrics), flush=True)


def main():
    # The config arrives twice: as JSON in GPU_WORKBENCH_CONFIG, and as the ${config.<name>}
    # placeholders the spec puts in the command line. Either is enough; flags win here.
    config = json.loads(os.environ.get("GPU_WORKBENCH_CONFIG", "{}"))
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=config.get("lr", 1e-3))
    p.add_argument("--batch-size", type=int, default=config.get("batch_size", 32))
    p.add_argument("--optimizer", default=config.get("optimizer", "sgd"))
    p.add_argument("--epochs", type=int, default=config.get("epochs", 20))
    p.add_argument("--sleep-ms", type=float, default=5)
    args = p.parse_args()

    rng = random.Random(zlib.crc32(repr((args.lr, args.batch_size, args.optimizer)).encode()))
    floor = (math.log10(args.lr) + 2.5) ** 2 * 0.3 + abs(math.log2(args.batch_size) - 6) * 0.05
    floor += 0.0 if args.optimizer == "adam" else 0.15
    rate = min(1.0, args.lr * 100)
    start = 2.5
    for epoch in range(1, args.epochs + 1):
        loss = floor + (start - floor) * math.exp(-rate * epoch) + rng.gauss(0, 0.01)
        report(loss=round(loss, 5), epoch=epoch)
        time.sleep(args.sleep_ms / 1000)


if __name__ == "__main__":
    main()
