"""Per-rank memory after every optimizer step.

torch >= 2.0: one global optimizer step post-hook (torch.optim.optimizer.register_optimizer_step_post_hook)
covers every optimizer of the process. torch 1.13 has none: the ``step`` of each optimizer class is
wrapped when its first instance is made (a step that calls its base class's step counts once).

Each step sends one ``memory`` message per device: on CUDA (a process that initialised it) the
caching allocator's allocated, reserved and peak allocated bytes (the peak is reset after every
step, so it is the step's own peak); on CPU the process's resident set size and its peak over the
step (Linux resets the peak, VmHWM, through /proc/self/clear_refs; where it cannot, the peak is
the process's since its start and ``peakSinceStart`` says so).
"""
import os
import sys
import threading
import time

from . import _channel

_state = {"step": 0, "last": None, "clear_refs": None}
_local = threading.local()


def _rss_linux():
    """(rss, peak rss) in bytes from /proc/self/status, or None."""
    try:
        with open("/proc/self/status", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    if rss is None:
        return None
    return rss, hwm if hwm is not None else rss


def _reset_peak_rss():
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    if _state["clear_refs"] is False:
        return False
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _state["clear_refs"] = True
        return True
    except OSError:
        _state["clear_refs"] = False
        return False


def _cpu_record():
    linux = _rss_linux()
    if linux is not None:
        rss, peak = linux
    else:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
        rss = peak
    since_start = not _reset_peak_rss()
    record = {"kind": "cpu", "device": "cpu", "rssBytes": rss, "peakRssBytes": max(peak, rss)}
    if since_start:
        record["peakSinceStart"] = True
    return record


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

    def report():
        try:
            after_step(torch, channel)
        except Exception as err:  # never break the user's training
            sys.stderr.write("gpu_workbench: memory report failed (%s: %s); reporting stops\n" % (type(err).__name__, err))
            channel.send = lambda message: None

    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(lambda optimizer, args, kwargs: report())
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
                report()
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

