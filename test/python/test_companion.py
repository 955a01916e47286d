"""The gpu_workbench companion (python/gpu_workbench), with the interpreter that runs these tests.

    /usr/bin/python3 -m unittest discover -s test/python -v

(Debian's python3-torch 1.13 on CPU here; the mocha test test/unit/companion/python.test.ts runs
this file.) Each test runs real scripts in a child interpreter, as torchrun would.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPANION = os.path.join(ROOT, "python")

try:
    import torch

    TORCH = None
except ImportError as err:
    TORCH = "%s has no torch (%s)" % (sys.executable, err)


class Server:
    """The extension's end of the channel: a Unix socket that keeps every line it receives, per connection."""

    def __init__(self, folder):
        self.path = os.path.join(folder, "channel.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.connections = []
        self.threads = []
        self.accepter = threading.Thread(target=self._accept, daemon=True)
        self.accepter.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            lines = []
            self.connections.append(lines)
            t = threading.Thread(target=self._read, args=(conn, lines), daemon=True)
            self.threads.append(t)
            t.start()

    @staticmethod
    def _read(conn, lines):
        buf = b""
        while True:
            data = conn.recv(65536)
            if not data:
                break
            buf += data
        conn.close()
        lines.extend(buf.decode("utf-8").splitlines())

    def messages(self):
        """Every message, once every connection that was made has ended (the child has exited)."""
        for t in list(self.threads):
            t.join(10)
        return [json.loads(line) for lines in self.connections for line in lines]

    def close(self):
        self.sock.close()


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gw-companion-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def script(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return path

    def env(self, channel=None, **extra):
        env = {k: v for k, v in os.environ.items() if k not in ("GPU_WORKBENCH_CHANNEL", "RANK", "LOCAL_RANK", "WORLD_SIZE")}
        env["PYTHONPATH"] = COMPANION + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        if channel is not None:
            env["GPU_WORKBENCH_CHANNEL"] = "unix:" + channel.path
        env.update(extra)
        return env

    def run_py(self, argv, env, cwd=None):
        return subprocess.run([sys.executable] + argv, cwd=cwd or self.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)

    def wrapped(self, argv, env, cwd=None):
        return self.run_py(["-m", "gpu_workbench.run"] + argv, env, cwd)


class ChannelCase(Case):
    """A Case with the extension's end of the channel listening (`self.server`)."""

    def setUp(self):
        super().setUp()
        self.server = Server(self.dir)

    def tearDown(self):
        self.server.close()
        super().tearDown()


class RunWrapper(Case):
    """python -m gpu_workbench.run script.py args behaves as python script.py args."""

    def test_argv_file_name_and_path_as_when_the_script_runs_alone(self):
        os.mkdir(os.path.join(self.dir, "sub"))
        self.script("sub/helper.py", "VALUE = 'found next to the script'\n")
        self.script("sub/show.py", """\
            '''the docstring'''
            import json, sys
            import helper
            print(json.dumps({"argv": sys.argv, "file": __file__, "name": __name__, "doc": __doc__, "path0": sys.path[0],
                              "main_is_us": sys.modules["__main__"].__dict__ is globals(), "helper": helper.VALUE}))
            """)
        argv = ["sub/show.py", "--lr", "0.1", "x y"]
        alone = self.run_py(argv, self.env())
        ours = self.wrapped(argv, self.env())
        self.assertEqual(alone.returncode, 0, alone.stderr)
        self.assertEqual(ours.returncode, 0, ours.stderr)
        self.assertEqual(json.loads(ours.stdout), json.loads(alone.stdout))
        self.assertEqual(json.loads(ours.stdout)["argv"], ["sub/show.py", "--lr", "0.1", "x y"])
        self.assertEqual(ours.stderr, b"")

    def test_exit_codes_as_when_the_script_runs_alone(self):
        for body, code in (("import sys; sys.exit(3)", 3), ("raise SystemExit('bye')", 1), ("pass", 0)):
            path = self.script("exit.py", body + "\n")
            alone = self.run_py([path], self.env())
            ours = self.wrapped([path], self.env())
            self.assertEqual((ours.returncode, ours.stdout, ours.stderr), (alone.returncode, alone.stdout, alone.stderr), body)
            self.assertEqual(ours.returncode, code, body)

    def test_an_uncaught_exception_prints_the_same_traceback_ending_at_the_users_line(self):
        path = self.script("fails.py", """\
            import json

            def load(text):
                return json.loads(text)["missing"]

            print("before")
            try:
                load("{")
            except ValueError as err:
                raise KeyError("while loading") from err
            """)
        alone = self.run_py([path], self.env())
        ours = self.wrapped([path], self.env())
        self.assertEqual(ours.returncode, 1)
        self.assertEqual(ours.stdout, b"before\n")
        self.assertEqual(ours.stderr.decode(), alone.stderr.decode())
        lines = ours.stderr.decode().splitlines()
        self.assertEqual(lines[-3:-1], ['  File "%s", line 10, in <module>' % path, '    raise KeyError("while loading") from err'])
        self.assertNotIn("gpu_workbench", ours.stderr.decode())

    def test_a_script_that_cannot_be_opened_fails_as_python_does(self):
        alone = self.run_py(["nowhere.py"], self.env())
        ours = self.wrapped(["nowhere.py"], self.env())
        self.assertEqual((ours.returncode, ours.stderr), (alone.returncode, alone.stderr))


@unittest.skipIf(TORCH, TORCH)
class StepMemory(ChannelCase):
    MLP = """\
        import os, sys
        os.environ["OMP_NUM_THREADS"] = "1"
        print("torch imported before the script:", "torch" in sys.modules)
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
        for step in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if step == 1:
                big = torch.ones(32 * 1024 * 1024 // 4)  # 32 MiB during step 2 only
                del big
            opt.step()
            print("step", step + 1, "loss", round(loss.item(), 3))
        """

    def test_every_optimizer_step_sends_the_ranks_memory_and_the_scripts_stdout_is_untouched(self):
        path = self.script("mlp.py", self.MLP)
        ours = self.wrapped([path], self.env(self.server, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2"))
        self.assertEqual(ours.returncode, 0, ours.stderr)
        alone = self.run_py([path], self.env())
        self.assertEqual(ours.stdout, alone.stdout, "the channel never writes to stdout")
        self.assertIn(b"torch imported before the script: False", ours.stdout)
        messages = self.server.messages()
        self.assertEqual(len(self.server.connections), 1)
        kinds = [m["type"] for m in messages]
        # The first step's model summary (test_modules.py) comes before that step's memory.
        self.assertEqual(kinds, ["hello", "hooks", "modelSummary", "memory", "memory", "memory"], messages)
        hooks = messages[1]
        import importlib
        optimizer_module = importlib.import_module("torch.optim.optimizer")
        self.assertEqual(hooks["stepHook"], "post-hook" if hasattr(optimizer_module, "register_optimizer_step_post_hook") else "step-wrapper")
        memory = messages[3:]
        self.assertEqual([m["step"] for m in memory], [1, 2, 3])
        for m in memory:
            self.assertEqual((m["rank"], m["localRank"], m["worldSize"], m["kind"], m["device"], m["v"]), (1, 1, 2, "cpu", "cpu", 1), m)
            self.assertGreater(m["rssBytes"], 10 * 2**20, m)
            self.assertGreaterEqual(m["peakRssBytes"], m["rssBytes"], m)
            self.assertGreater(m["stepSeconds"], 0)
            self.assertNotIn("allocatedBytes", m)
        if sys.platform.startswith("linux") and "peakSinceStart" not in memory[1]:
            # The 32 MiB lived in step 2 only: its peak shows it, step 3's (reset after step 2) does not.
            self.assertGreater(memory[1]["peakRssBytes"] - memory[1]["rssBytes"], 24 * 2**20, memory)
            self.assertLess(memory[2]["peakRssBytes"] - memory[2]["rssBytes"], 16 * 2**20, memory)

    def test_a_step_that_calls_its_base_class_step_counts_once_and_two_optimizers_count_twice(self):
        path = self.script("gan.py", """\
            import torch
            class Clipped(torch.optim.SGD):
                def step(self, closure=None):
                    return super().step(closure)
            a, b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
            oa, ob = Clipped(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
            for _ in range(2):
                a(torch.randn(2, 4)).sum().backward(); oa.step()
                b(torch.randn(2, 4)).sum().backward(); ob.step()
            """)
        ours = self.wrapped([path], self.env(self.server))
        self.assertEqual(ours.returncode, 0, ours.stderr)
        steps = [m["step"] for m in self.server.messages() if m["type"] == "memory"]
        self.assertEqual(steps, [1, 2, 3, 4])

    def test_without_the_channel_nothing_is_hooked_nor_imported(self):
        path = self.script("quiet.py", """\
            import sys
            import gpu_workbench
            print(sorted(m for m in ("torch", "gpu_workbench._channel", "gpu_workbench._memory", "gpu_workbench._hooks") if m in sys.modules))
            import torch
            print(type(torch.optim.Optimizer.__init__).__name__, torch.optim.Optimizer.__init__.__qualname__)
            print([type(f).__name__ for f in sys.meta_path if "gpu_workbench" in type(f).__module__])
            """)
        plain = self.run_py([path], self.env())
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(plain.stdout.decode().splitlines(), ["[]", "function Optimizer.__init__", "[]"])
        ours = self.wrapped([path], self.env())
        self.assertEqual(ours.returncode, 0, ours.stderr)
        # Under the wrapper only what the wrapper itself needs is loaded; torch is untouched.
        self.assertEqual(ours.stdout.decode().splitlines()[1:], ["function Optimizer.__init__", "[]"])
        self.assertNotIn("torch", ours.stdout.decode().splitlines()[0])
        self.assertEqual(self.server.messages(), [])

    def test_a_channel_that_cannot_be_reached_leaves_the_script_running(self):
        path = self.script("mlp.py", self.MLP)
        ours = self.wrapped([path], self.env(None, GPU_WORKBENCH_CHANNEL="unix:" + os.path.join(self.dir, "gone.sock")))
        self.assertEqual(ours.returncode, 0, ours.stderr)
        self.assertIn(b"step 3 loss", ours.stdout)
        self.assertRegex(ours.stderr.decode(), r"^gpu_workbench: cannot reach GPU Workbench's channel unix:.*gone\.sock .*; the companion stays off\n$")


class CudaRecords(unittest.TestCase):
    """The CUDA branch without a GPU: a stand-in torch.cuda with the allocator's numbers (no GPU here)."""

    def test_allocated_reserved_and_the_steps_peak_per_device_the_process_uses_and_the_peak_is_reset(self):
        sys.path.insert(0, COMPANION)
        try:
            from gpu_workbench import _memory
        finally:
            sys.path.remove(COMPANION)
        resets = []

        class Cuda:
            reserved = {0: 0, 1: 2048}

            def is_available(self): return True
            def is_initialized(self): return True
            def device_count(self): return 2
            def current_device(self): return 1
            def memory_reserved(self, i): return self.reserved[i]
            def memory_allocated(self, i): return 1000 + i
            def max_memory_allocated(self, i): return 1500 + i
            def reset_peak_memory_stats(self, i): resets.append(i)

        class Torch:
            cuda = Cuda()

        self.assertEqual(_memory._cuda_records(Torch), [{"kind": "cuda", "device": "cuda:1", "allocatedBytes": 1001, "reservedBytes": 2048, "peakAllocatedBytes": 1501}])
        self.assertEqual(resets, [1])
        Torch.cuda.is_initialized = lambda: False
        self.assertIsNone(_memory._cuda_records(Torch), "a process that never used CUDA reports its CPU memory")


class PostHook(unittest.TestCase):
    """torch >= 2.0's global post-hook path without torch 2 here: a stand-in torch.optim.optimizer that has it."""

    def test_torch_2_registers_one_global_post_hook_and_each_call_sends_the_steps_memory(self):
        import types

        sys.path.insert(0, COMPANION)
        try:
            from gpu_workbench import _memory
        finally:
            sys.path.remove(COMPANION)
        hooks = []
        optimizer = types.ModuleType("torch.optim.optimizer")
        optimizer.register_optimizer_step_post_hook = hooks.append
        optim = types.ModuleType("torch.optim")
        optim.optimizer = optimizer
        torch_stub = types.ModuleType("torch")
        torch_stub.optim = optim
        torch_stub.cuda = types.SimpleNamespace(is_available=lambda: False)
        saved = {k: sys.modules.get(k) for k in ("torch", "torch.optim", "torch.optim.optimizer")}
        sys.modules.update({"torch": torch_stub, "torch.optim": optim, "torch.optim.optimizer": optimizer})
        sent = []
        try:
            self.assertEqual(_memory.install(torch_stub, types.SimpleNamespace(send=sent.append)), "post-hook")
            self.assertEqual(len(hooks), 1)
            hooks[0](object(), (), {})
            hooks[0](object(), (), {})
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
        self.assertEqual([(m["type"], m["step"] - sent[0]["step"], m["kind"]) for m in sent], [("memory", 0, "cpu"), ("memory", 1, "cpu")])


class Report(Case):
    SCRIPT = """\
        import gpu_workbench
        print("training")
        gpu_workbench.report(loss=0.25, accuracy=0.5, note="ok", done=True)
        """

    def test_without_the_channel_report_prints_the_report_line_tuning_reads(self):
        path = self.script("rep.py", self.SCRIPT)
        out = self.run_py([path], self.env())
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.decode().splitlines()
        self.assertEqual(lines[0], "training")
        self.assertTrue(lines[1].startswith("::report::"))
        self.assertEqual(json.loads(lines[1][len("::report::"):]), {"loss": 0.25, "accuracy": 0.5, "note": "ok", "done": True})

    def test_with_the_channel_report_goes_over_it_and_not_to_stdout(self):
        server = Server(self.dir)
        try:
            path = self.script("rep.py", self.SCRIPT)
            out = self.wrapped([path], self.env(server, RANK="0", WORLD_SIZE="1"))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, b"training\n")
            reports = [m for m in server.messages() if m["type"] == "report"]
            self.assertEqual([(m["rank"], m["metrics"]) for m in reports], [(0, {"loss": 0.25, "accuracy": 0.5, "note": "ok", "done": True})])
        finally:
            server.close()

    @unittest.skipIf(TORCH, TORCH)
    def test_a_one_element_tensor_is_reported_as_its_number_and_a_list_is_refused(self):
        path = self.script("rep.py", """\
            import torch, gpu_workbench
            gpu_workbench.report(loss=torch.tensor(0.5))
            gpu_workbench.report(losses=[1, 2])
            """)
        out = self.run_py([path], self.env())
        self.assertEqual(out.stdout.decode(), '::report::{"loss": 0.5}\n')
        self.assertEqual(out.returncode, 1)
        self.assertIn("TypeError: gpu_workbench.report(losses=...): expected a number, string, bool or None, got list", out.stderr.decode())


if __name__ == "__main__":
    unittest.main()
