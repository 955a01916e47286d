"""Find Max Batch Size trials under the companion: the step limit, the CPU memory limit, out of memory on the channel.

    /usr/bin/python3 -m unittest discover -s test/python -v

(run by test/unit/companion/python.test.ts with the rest of test/python.)
"""
import os
import sys
import unittest

from test_companion import COMPANION, TORCH, ChannelCase

sys.path.insert(0, COMPANION)
from gpu_workbench import _trial  # noqa: E402

MIB = 1 << 20


@unittest.skipIf(TORCH, TORCH)
class StepLimit(ChannelCase):
    LOOP = """\
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        try:
            for step in range(1, 11):
                opt.zero_grad()
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                print("after step", step, flush=True)
            print("all 10 steps")
        finally:
            print("finally ran", flush=True)
        """

    def test_the_run_ends_with_status_0_right_after_the_nth_step_and_says_so_on_the_channel(self):
        path = self.script("loop.py", self.LOOP)
        ours = self.wrapped([path], self.env(self.server, GPU_WORKBENCH_MAX_STEPS="3"))
        self.assertEqual(ours.returncode, 0, ours.stderr)
        self.assertEqual(ours.stdout.decode().splitlines(), ["after step 1", "after step 2", "finally ran"])
        self.assertEqual(ours.stderr, b"")
        messages = self.server.messages()
        self.assertEqual([m["step"] for m in messages if m["type"] == "memory"], [1, 2, 3])
        stopped = [m for m in messages if m["type"] == "stopped"]
        self.assertEqual(stopped, [{"v": 1, "rank": 0, "localRank": 0, "worldSize": 1, "type": "stopped", "step": 3, "maxSteps": 3}])
        self.assertEqual(messages[-1]["type"], "stopped", "nothing after the stop")

    def test_without_the_channel_the_limit_still_ends_the_run_and_without_the_limit_it_runs_to_the_end(self):
        path = self.script("loop.py", self.LOOP)
        limited = self.wrapped([path], self.env(GPU_WORKBENCH_MAX_STEPS="2"))
        self.assertEqual((limited.returncode, limited.stdout.decode().splitlines()), (0, ["after step 1", "finally ran"]), limited.stderr)
        free = self.wrapped([path], self.env(self.server))
        self.assertEqual(free.returncode, 0, free.stderr)
        self.assertIn(b"all 10 steps", free.stdout)

    def test_a_bad_limit_is_named_on_stderr_and_ignored(self):
        path = self.script("loop.py", self.LOOP)
        ours = self.wrapped([path], self.env(self.server, GPU_WORKBENCH_MAX_STEPS="two"))
        self.assertEqual(ours.returncode, 0)
        self.assertIn(b"all 10 steps", ours.stdout)
        self.assertIn("GPU_WORKBENCH_MAX_STEPS='two' is not a whole number of at least 1; ignored", ours.stderr.decode())


@unittest.skipIf(TORCH, TORCH)
class CpuOutOfMemory(ChannelCase):
    # batch x 1 MiB of activations, written (so the pages are really used), then one step.
    GROW = """\
        import resource, sys
        import torch
        print("limit", resource.getrlimit(resource.RLIMIT_DATA)[0], flush=True)
        batch = int(sys.argv[1])
        w = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        x = torch.ones(batch, 256 * 1024) * w
        x.sum().backward()
        print("fits", batch, flush=True)
        opt.step()  # the trial's only step: the run ends here
        """
    LIMIT = 700 * MIB  # Debian's torch 1.13 takes about 282 MB of data once imported

    def test_under_the_limit_the_cpu_allocator_fails_cleanly_and_the_channel_says_out_of_memory_with_the_batch(self):
        path = self.script("grow.py", self.GROW)
        env = self.env(self.server, GPU_WORKBENCH_MEMORY_LIMIT=str(self.LIMIT), GPU_WORKBENCH_BATCH_SIZE="2048", GPU_WORKBENCH_MAX_STEPS="1")
        ours = self.wrapped([path, "2048"], env)
        # An exception of the script (exit 1, its traceback), not a process killed by the kernel (-9).
        self.assertEqual(ours.returncode, 1, ours.stderr)
        self.assertIn(("limit %d" % self.LIMIT).encode(), ours.stdout)
        self.assertRegex(ours.stderr.decode(), r"RuntimeError: \[enforce fail at alloc_cpu\.cpp:\d+\] .*DefaultCPUAllocator: can't allocate memory")
        oom = [m for m in self.server.messages() if m["type"] == "oom"]
        self.assertEqual(len(oom), 1, oom)
        self.assertEqual({k: oom[0][k] for k in ("device", "error", "batchSize", "rank")}, {"device": "cpu", "error": "RuntimeError", "batchSize": 2048, "rank": 0})
        self.assertIn("DefaultCPUAllocator: can't allocate memory", oom[0]["message"])
        # It failed before its first step (no memory message): the oom message carries the memory it had.
        self.assertEqual([m for m in self.server.messages() if m["type"] == "memory"], [])
        (record,) = oom[0]["memory"]
        self.assertEqual((record["kind"], record["device"]), ("cpu", "cpu"))
        self.assertGreater(record["rssBytes"], 50 * MIB, "torch alone takes more")
        self.assertLess(record["peakRssBytes"], self.LIMIT)
        self.assertGreaterEqual(record["peakRssBytes"], record["rssBytes"])

    def test_a_batch_that_fits_under_the_same_limit_runs_and_sends_no_out_of_memory(self):
        path = self.script("grow.py", self.GROW)
        ours = self.wrapped([path, "64"], self.env(self.server, GPU_WORKBENCH_MEMORY_LIMIT=str(self.LIMIT), GPU_WORKBENCH_MAX_STEPS="1"))
        self.assertEqual(ours.returncode, 0, ours.stderr)
        self.assertIn(b"fits 64", ours.stdout)
        types = [m["type"] for m in self.server.messages()]
        self.assertNotIn("oom", types)
        self.assertIn("stopped", types)

    def test_a_first_matrix_product_with_the_memory_full_still_runs_instead_of_spinning_in_openblas(self):
        # OpenBLAS maps its work buffer at its first product and retries a failed mmap for ever:
        # the companion has it mapped before it sets the limit.
        path = self.script("full.py", """\
            import torch
            chunks = []
            try:
                while True:
                    chunks.append(torch.ones(4 * 1024 * 1024))  # 16 MiB each, until the limit
            except RuntimeError as err:
                print("full after", len(chunks), "chunks:", "can't allocate memory" in str(err), flush=True)
            chunks.pop()
            print("product", float((torch.ones(256, 256) @ torch.ones(256, 256))[0, 0]), flush=True)
            """)
        ours = self.wrapped([path], self.env(self.server, GPU_WORKBENCH_MEMORY_LIMIT=str(self.LIMIT)))
        self.assertEqual(ours.returncode, 0, ours.stderr)
        self.assertRegex(ours.stdout.decode(), r"full after \d+ chunks: True\nproduct 256\.0\n")

    def test_another_error_is_no_out_of_memory(self):
        path = self.script("bad.py", "import torch\ntorch.ones(2, 3) @ torch.ones(2, 3)\n")
        ours = self.wrapped([path], self.env(self.server, GPU_WORKBENCH_MEMORY_LIMIT=str(self.LIMIT)))
        self.assertEqual(ours.returncode, 1)
        self.assertIn(b"mat1 and mat2 shapes cannot be multiplied", ours.stderr)
        self.assertEqual([m for m in self.server.messages() if m["type"] == "oom"], [])


class CudaOutOfMemoryMemory(unittest.TestCase):
    """A CUDA out-of-memory error's message carries the allocator's numbers (a stand-in torch.cuda: no GPU here)."""

    def test_the_oom_message_has_allocated_reserved_and_the_peak_of_each_device_in_use(self):
        sent = []

        class Channel:
            @staticmethod
            def send(message):
                sent.append(message)

        class Cuda:
            def is_available(self): return True
            def is_initialized(self): return True
            def device_count(self): return 1
            def current_device(self): return 0
            def memory_reserved(self, i): return 6 << 30
            def memory_allocated(self, i): return 5 << 30
            def max_memory_allocated(self, i): return (5 << 30) + (1 << 29)
            def reset_peak_memory_stats(self, i): pass

        class Torch:
            cuda = Cuda()

        class OutOfMemoryError(RuntimeError):
            pass

        saved = (_trial._channel.get, sys.modules.get("torch"), os.environ.get(_trial.BATCH_SIZE_ENV))
        _trial._channel.get = lambda: Channel
        sys.modules["torch"] = Torch
        os.environ[_trial.BATCH_SIZE_ENV] = "512"
        try:
            _trial.report_failure(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
        finally:
            _trial._channel.get = saved[0]
            if saved[1] is None:
                del sys.modules["torch"]
            else:
                sys.modules["torch"] = saved[1]
            if saved[2] is None:
                del os.environ[_trial.BATCH_SIZE_ENV]
            else:
                os.environ[_trial.BATCH_SIZE_ENV] = saved[2]
        (oom,) = sent
        self.assertEqual((oom["type"], oom["device"], oom["batchSize"]), ("oom", "cuda", 512))
        self.assertEqual(oom["memory"], [{"kind": "cuda", "device": "cuda:0", "allocatedBytes": 5 << 30, "reservedBytes": 6 << 30, "peakAllocatedBytes": (5 << 30) + (1 << 29)}])


class Classify(unittest.TestCase):
    def test_what_counts_as_out_of_memory(self):
        class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError (torch >= 1.13)
            pass

        self.assertEqual(_trial.out_of_memory(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")), "cuda")
        self.assertEqual(_trial.out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)")), "cuda")
        self.assertEqual(_trial.out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4194304000 bytes.")), "cpu")
        self.assertEqual(_trial.out_of_memory(RuntimeError("[enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1024 bytes.")), "cpu")
        self.assertEqual(_trial.out_of_memory(MemoryError()), "cpu")
        self.assertIsNone(_trial.out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 9x2)")))
        self.assertIsNone(_trial.out_of_memory(ValueError("out of memory budget")))


if __name__ == "__main__":
    unittest.main()
