"""The companion's overhead per optimizer step, as a ratio of the step's time (issue #15: under 2 %).

    /usr/bin/python3 bench/companion/overhead.py [--rounds 7] [--steps 50]

One process, the model and batch of examples/torchrun/ddp_mnist_like.py (without DDP: one rank,
CPU), in rounds that alternate plain steps and steps with the companion's hook (connected to a
local Unix socket whose reader runs in a thread, as the extension's would). Prints the median
step time of each and their ratio, and the median time of the hook alone (2000 calls) as a share
of the plain step: on a loaded machine the difference of two step medians is noise, the hook's
own time is the steadier number.

The module hooks (_modules.py: global forward pre/post hooks, after the first step) are on in the
companion's rounds too; their own cost is measured per module call on a chain of 100 nn.Identity
modules (with vs without the hooks, alternating) and given per step for the model's module calls.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--clock", choices=("thread", "wall"), default="thread")
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

    # The reader is another process, as the extension host is (a reader thread here would share
    # this process's GIL with the training loop, which the real extension does not).
    count_r, count_w = os.pipe()
    reader = os.fork()
    if reader == 0:
        try:
            read()
            os.write(count_w, str(received[0]).encode())
        finally:
            os._exit(0)
    server.close()
    os.close(count_w)
    os.environ["GPU_WORKBENCH_CHANNEL"] = "unix:" + path
    import torch
    from torch import nn

    # CPU time of this thread, with torch on this one thread: on a machine shared with other work
    # (load 12 on 2 cores here) wall-clock medians swing by +-20 %; the thread's own CPU time does not
    # count the time it waits for a core. --clock wall for wall-clock time (and torch's own threads).
    if args.clock == "thread":
        torch.set_num_threads(1)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter

    from gpu_workbench import _channel, _memory, _modules

    channel = _channel.get()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))

    _modules.install(torch, channel)
    _modules.on_step(opt)  # past the first step: the light hooks the companion keeps

    def hooks(on):
        import torch.nn.modules.module as mm

        for h in _modules._s.handles:
            h.remove()
        _modules._s.handles = [mm.register_module_forward_pre_hook(_modules._pre_light), mm.register_module_forward_hook(_modules._post_light)] if on else []

    def steps(n, hook, module_hooks=None):
        hooks(hook if module_hooks is None else module_hooks)
        times = []
        for _ in range(n):
            t0 = clock()
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if hook:
                _memory.after_step(torch, channel)
            times.append(clock() - t0)
        return times

    steps(20, False)
    plain, hooked, step_only = [], [], []
    for i in range(args.rounds):
        # Which goes first rotates: a later one of a round runs on a warmer (or more loaded) machine.
        runs = [(plain, False, None), (hooked, True, None), (step_only, True, False)]
        for series, hook, module_hooks in runs[i % 3:] + runs[:i % 3]:
            series.extend(steps(args.steps, hook, module_hooks))
    p, h = statistics.median(plain), statistics.median(hooked)
    so = statistics.median(step_only)
    print("torch %s, %d rounds x %d steps each, %s" % (torch.__version__, args.rounds, args.steps, "thread CPU time, 1 torch thread" if args.clock == "thread" else "wall-clock time"))
    print("median step: plain %.3f ms, with the companion %.3f ms" % (p * 1e3, h * 1e3))
    print("overhead ratio: %.4f (%+.2f %%)" % (h / p, (h / p - 1) * 100))
    print("the module hooks' share: with the step hook only %.3f ms, with the module hooks too %.3f ms: ratio %.4f (%+.2f %%)" % (so * 1e3, h * 1e3, h / so, (h / so - 1) * 100))
    # The hook alone, many times: steadier than the difference of two noisy step medians.
    hook = []
    for _ in range(2000):
        t0 = clock()
        _memory.after_step(torch, channel)
        hook.append(clock() - t0)
    k = statistics.median(hook)
    print("the hook alone: median %.1f us per step = %.3f %% of the plain step" % (k * 1e6, k / p * 100))
    # The module hooks alone, per module call: a chain of 100 nn.Identity, with and without them.
    chain = nn.Sequential(*[nn.Identity() for _ in range(100)])
    t = torch.zeros(1)
    per = {True: [], False: []}
    for _ in range(40):
        for on in (False, True):
            hooks(on)
            t0 = clock()
            for _ in range(20):
                chain(t)
            per[on].append((clock() - t0) / 20 / 101)
    hooks(False)
    call = statistics.median(per[True]) - statistics.median(per[False])
    calls = len(list(model.modules()))
    print("the module hooks alone: median %.2f us per module call, x %d module calls a step = %.3f %% of the plain step" % (call * 1e6, calls, call * calls / p * 100))
    print("the companion's own time in all: %.3f %% of the plain step" % ((k + call * calls) / p * 100))
    channel.close()
    os.waitpid(reader, 0)
    print("messages received: %s" % os.read(count_r, 64).decode())


if __name__ == "__main__":
    main()
