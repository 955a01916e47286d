"""A trial of Find Max Batch Size: a step limit, a memory limit, and out of memory said over the channel.

The search runs the user's script for a few optimizer steps at each batch size it tries. It tells
the companion, in the environment:

- ``GPU_WORKBENCH_MAX_STEPS=N``: after the N-th optimizer step the run ends cleanly (exit status 0,
  ``finally`` blocks and atexit handlers run): a ``stopped`` message, then ``SystemExit(0)`` from
  inside ``optimizer.step()``. Under torchrun every rank stops at its N-th step.
- ``GPU_WORKBENCH_MEMORY_LIMIT=BYTES``: on a machine without a GPU, the trial's memory. Set as
  RLIMIT_DATA once the script has imported torch: an allocation past it fails with ENOMEM, which torch's CPU
  allocator turns into ``RuntimeError: ... DefaultCPUAllocator: can't allocate memory``, so the
  trial fails as a GPU does, instead of the kernel's OOM killer ending it (or the machine swapping).
  RLIMIT_DATA, not RLIMIT_AS: it counts the memory the process writes (heap, private mappings), not
  the address space that torch's shared libraries and the threads' reserved arenas take (measured
  with Debian's torch 1.13: 812 MB of address space, 282 MB of data right after ``import torch``).
  Before the limit, one matrix product: OpenBLAS (Debian's torch computes with it) maps its work
  buffers at its first use, and where that mmap fails it retries for ever (measured here: a trial
  whose first product came with the memory nearly full spun in blas_memory_alloc until killed);
  once mapped, its buffers are reused.
- ``GPU_WORKBENCH_BATCH_SIZE=N``: the batch size under trial, sent with an ``oom`` message.

An uncaught out-of-memory error (``torch.cuda.OutOfMemoryError``, the older ``RuntimeError: CUDA
out of memory``, the CPU allocator's failure, Python's ``MemoryError``) is sent as an ``oom``
message before Python prints it, so the extension need not read it from stderr. It carries the
memory at the failure (CUDA: allocated, reserved and the peak since the last step; CPU: the RSS and
its peak), since a trial that fails in its first step has sent no memory message before.
"""
import os
import re
import sys

from . import _channel

MAX_STEPS_ENV = "GPU_WORKBENCH_MAX_STEPS"
MEMORY_LIMIT_ENV = "GPU_WORKBENCH_MEMORY_LIMIT"
BATCH_SIZE_ENV = "GPU_WORKBENCH_BATCH_SIZE"

_CUDA_OOM = re.compile(r"CUDA out of memory|CUDA error: out of memory|HIP out of memory")
_CPU_OOM = re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)")


def _whole(name):
    """The variable as a whole number >= 1; None when unset; a message on stderr and None when bad."""
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit() or int(value) < 1:
        sys.stderr.write("gpu_workbench: %s=%r is not a whole number of at least 1; ignored\n" % (name, value))
        return None
    return int(value)


def max_steps():
    return _whole(MAX_STEPS_ENV)


def wanted():
    """Whether this run is a trial that needs the torch hooks even without the channel."""
    return bool(os.environ.get(MAX_STEPS_ENV) or os.environ.get(MEMORY_LIMIT_ENV))


def apply_memory_limit(torch):
    """Sets RLIMIT_DATA from GPU_WORKBENCH_MEMORY_LIMIT (bytes) once torch is imported, its BLAS buffers mapped first."""
    limit = _whole(MEMORY_LIMIT_ENV)
    if limit is None:
        return None
    try:
        import resource

        with torch.no_grad():
            torch.ones(512, 512) @ torch.ones(512, 512)  # OpenBLAS maps its buffers now, not at an allocation that fails

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY and limit > hard:
            limit = hard
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except Exception as err:  # no resource module (Windows), refused, or torch failed: never break the script
        sys.stderr.write("gpu_workbench: cannot limit the memory to %s bytes (%s); the trial runs without a limit\n" % (limit, err))
        return None
    return limit


def after_step(step):
    """Called after each optimizer step of the process (``step``: steps so far); ends the run at the limit."""
    limit = max_steps()
    if limit is None or step < limit:
        return
    channel = _channel.get()
    if channel is not None:
        channel.send(dict(_channel.rank_fields(), type="stopped", step=step, maxSteps=limit))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass
    raise SystemExit(0)


def out_of_memory(err):
    """'cuda' or 'cpu' when ``err`` is an out-of-memory error, else None."""
    names = {cls.__name__ for cls in type(err).__mro__}
    text = str(err)
    if "OutOfMemoryError" in names or _CUDA_OOM.search(text):
        return "cuda"
    if isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and _CPU_OOM.search(text)):
        return "cpu"
    return None


def report_failure(err):
    """An uncaught exception of the script: an ``oom`` message when it is out of memory."""
    device = out_of_memory(err)
    channel = _channel.get()
    if device is None or channel is None:
        return
    lines = [line for line in str(err).splitlines() if line.strip()]
    message = dict(_channel.rank_fields(), type="oom", device=device, error=type(err).__name__, message=(lines[0] if lines else "")[:500])
    batch = _whole(BATCH_SIZE_ENV)
    if batch is not None:
        message["batchSize"] = batch
    try:
        # The memory it had when it failed: a trial that ran out before its first optimizer step sent none.
        from . import _memory

        torch = sys.modules.get("torch")
        message["memory"] = (_memory._cuda_records(torch) if torch is not None else None) or [_memory._cpu_record()]
    except Exception:  # never hide the script's own error
        pass
    channel.send(message)
