"""Per-rank memory after every optimizer step.

torch >= 2.0: one global optimizer step post-hook (torch.optim.optimizer.register_optimizer_step_post_hook)
covers every optimizer of the process. torch 1.13 has none: the ``step`` of each optimizer class is
wrapped when its first instance is made (a step that calls its base class's step counts once).

Each step sends one ``memory`` message per device: on CUDA (a process that initialised it) the
caching allocator's allocated, reserved and peak allocated bytes (the peak is reset after every
step, so it is the step's own peak); on CPU the process's resident set size and its peak over the
step (Linux resets the peak through /proc/self/clear_refs; where it cannot, the peak is the
process's since its start and ``peakSinceStart`` says so).
"""
import os
import sys
import threading
import time

from . import _channel

_state = {"step": 0, "last": None}
_local = threading.local()
#: Called with the optimizer after each of its steps (the model summary's first step, _modules.py).
step_listeners = []


class _Rss:
    """The process's RSS and its peak, cheaply (a few microseconds a step): /proc/self/statm read
    through a kept descriptor, the peak from getrusage, reset through /proc/self/clear_refs (Linux >= 4.0)."""

    def __init__(self):
        import resource

        self.resource = resource
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.statm = self._open("/proc/self/statm", os.O_RDONLY)
        self.clear_refs = self._open("/proc/self/clear_refs", os.O_WRONLY)

    @staticmethod
    def _open(path, flags):
        try:
            return os.open(path, flags)
        except (OSError, AttributeError):
            return None

    def peak(self):
        peak = self.resource.getrusage(self.resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere

    def record(self):
        peak = self.peak()
        rss = None
        if self.statm is not None:
            try:
                rss = int(os.pread(self.statm, 256, 0).split()[1]) * self.page
            except (OSError, ValueError, IndexError):
                rss = None
        reset = False
        if self.clear_refs is not None:
            try:
                os.write(self.clear_refs, b"5")  # the peak starts again from the current RSS
                reset = True
            except OSError:
                self.clear_refs = None
        if rss is None:
            rss = peak  # no /proc: the peak is all there is
        record = {"kind": "cpu", "device": "cpu", "rssBytes": rss, "peakRssBytes": max(peak, rss)}
        if not reset:
            record["peakSinceStart"] = True
        return record


def _cpu_record():
    rss = _state.get("rss")
    if rss is None:
        rss = _state["rss"] = _Rss()
    return rss.record()


def _cuda_records(torch):
    cuda = torch.cuda
    if not (cuda.is_available() and cuda.is_initialized()):
        return None
    devices = [i for i in range(cuda.device_count()) if cuda.memory_reserved(i) > 0] or [cuda.current_device()]
    records = []
    for i in devices:
        records.append({
            "kind": "cuda",
            "device": "cuda:%d" % i,
            "allocatedBytes": int(cuda.memory_allocated(i)),
            "reservedBytes": int(cuda.memory_reserved(i)),
            "peakAllocatedBytes": int(cuda.max_memory_allocated(i)),
        })
        cuda.reset_peak_memory_stats(i)
    return records


def after_step(torch, channel):
    """Called once after each optimizer step of the process."""
    now = time.perf_counter()
    last = _state["last"]
    _state["last"] = now
    _state["step"] += 1
    base = _channel.rank_fields()
    base["type"] = "memory"
    # The process the GPU panel finds among nvidia-smi's (a rank's bar on its device card).
    base["pid"] = os.getpid()
    base["step"] = _state["step"]
    # The step's wall time: since the previous step ended (data, forward, backward and step); the
    # first step counts from when the companion started the script.
    base["stepSeconds"] = round(now - (last if last is not None else _channel.STARTED), 6)
    records = _cuda_records(torch) or [_cpu_record()]
    for record in records:
        message = dict(base)
        message.update(record)
        channel.send(message)


def install(torch, channel):
    """Hooks every optimizer's step; returns how ('post-hook' or 'step-wrapper')."""
    import importlib

    optimizer_module = importlib.import_module("torch.optim.optimizer")

    def report(optimizer=None):
        for listener in step_listeners:
            try:
                listener(optimizer)
            except Exception as err:  # never break the user's training
                sys.stderr.write("gpu_workbench: %s failed (%s: %s)\n" % (getattr(listener, "__name__", "a step listener"), type(err).__name__, err))
        try:
            after_step(torch, channel)
        except Exception as err:  # never break the user's training
            sys.stderr.write("gpu_workbench: memory report failed (%s: %s); reporting stops\n" % (type(err).__name__, err))
            channel.send = lambda message: None
        from . import _trial

        _trial.after_step(_state["step"])  # GPU_WORKBENCH_MAX_STEPS: ends the run (SystemExit(0)) at the limit

    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(lambda optimizer, args, kwargs: report(optimizer))
        return "post-hook"

    Optimizer = optimizer_module.Optimizer
    original_init = Optimizer.__init__

    def wrap_step(cls):
        step = cls.__dict__.get("step")
        if step is None or getattr(step, "_gpu_workbench", False):
            return

        def wrapped(self, *args, **kwargs):
            depth = getattr(_local, "depth", 0)
            _local.depth = depth + 1
            try:
                result = step(self, *args, **kwargs)
            finally:
                _local.depth = depth
            if depth == 0:
                report(self)
            return result

        wrapped._gpu_workbench = True
        for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
            if hasattr(step, attr):
                try:
                    setattr(wrapped, attr, getattr(step, attr))
                except (AttributeError, TypeError):
                    pass
        wrapped.__wrapped__ = step
        setattr(cls, "step", wrapped)

    def init(self, *args, **kwargs):
        for cls in type(self).__mro__:
            if isinstance(cls, type) and issubclass(cls, Optimizer):
                wrap_step(cls)
        original_init(self, *args, **kwargs)

    init.__wrapped__ = original_init
    Optimizer.__init__ = init
    return "step-wrapper"

