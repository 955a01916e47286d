"""The companion's overhead per optimizer step, as a ratio of the step's time (issue #15: under 2 %).

    /usr/bin/python3 bench/companion/overhead.py [--rounds 7] [--steps 50]

One process, the model and batch of examples/torchrun/ddp_mnist_like.py (without DDP: one rank,
CPU), in rounds that alternate plain steps and steps with the companion's hook (connected to a
local Unix socket whose reader runs in a thread, as the extension's would). Prints the median
step time of each and their ratio, and the median time of the hook alone (2000 calls) as a share
of the plain step: on a loaded machine the difference of two step medians is noise, the hook's
own time is the steadier number.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="gw-bench-")
    path = os.path.join(folder, "c.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    received = [0]

    def read():
        conn, _ = server.accept()
        while True:
            data = conn.recv(65536)
            if not data:
                return
            received[0] += data.count(b"\n")

    threading.Thread(target=read, daemon=True).start()
    os.environ["GPU_WORKBENCH_CHANNEL"] = "unix:" + path
    import torch
    from torch import nn

    from gpu_workbench import _channel, _memory

    channel = _channel.get()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def steps(n, hook):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if hook:
                _memory.after_step(torch, channel)
            times.append(time.perf_counter() - t0)
        return times

    steps(20, False)
    plain, hooked = [], []
    for _ in range(args.rounds):
        plain += steps(args.steps, False)
        hooked += steps(args.steps, True)
    p, h = statistics.median(plain), statistics.median(hooked)
    print("torch %s, %d rounds x %d steps each" % (torch.__version__, args.rounds, args.steps))
    print("median step: plain %.3f ms, with the companion %.3f ms" % (p * 1e3, h * 1e3))
    print("overhead ratio: %.4f (%+.2f %%)" % (h / p, (h / p - 1) * 100))
    # The hook alone, many times: steadier than the difference of two noisy step medians.
    hook = []
    for _ in range(2000):
        t0 = time.perf_counter()
        _memory.after_step(torch, channel)
        hook.append(time.perf_counter() - t0)
    k = statistics.median(hook)
    print("the hook alone: median %.1f us per step = %.3f %% of the plain step" % (k * 1e6, k / p * 100))
    channel.close()
    print("messages received: %d" % received[0])


if __name__ == "__main__":
    main()
