"""Installs the companion's hooks once torch is imported, without importing torch itself.

The script may set up its environment before ``import torch`` (OMP_NUM_THREADS, ...), so the
companion waits for the script's own import: a meta path finder wraps torch's loader and runs the
hooks right after torch's module has executed.
"""
import importlib.abc
import sys

from . import _channel, _trial


class _Quiet:
    """No channel, but a step limit to keep (a trial run by hand): the hooks run, nothing is sent."""

    @staticmethod
    def send(message):
        pass


def _on_torch(torch):
    _trial.apply_memory_limit(torch)  # a Find Max Batch Size trial on a CPU
    channel = _channel.get()
    if channel is None:
        if not _trial.wanted():
            return
        channel = _Quiet()
    from . import _memory

    how = _memory.install(torch, channel)
    from . import _modules

    if _modules.install(torch, channel):
        _memory.step_listeners.append(_modules.on_step)
    channel.send(dict(_channel.rank_fields(), type="hooks", torch=str(torch.__version__), stepHook=how))


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        if spec is not None:
            spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._finder.done(module)


class _TorchFinder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self._busy = False

    def find_spec(self, name, path, target=None):
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self)
        return spec

    def done(self, module):
        self.remove()
        try:
            _on_torch(module)
        except Exception as err:  # never break the user's script
            sys.stderr.write("gpu_workbench: hooks not installed (%s: %s)\n" % (type(err).__name__, err))

    def remove(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def install():
    """Hooks torch now if it is imported, else as soon as it is."""
    if _channel.get() is None and not _trial.wanted():
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        _on_torch(torch)
        return
    sys.meta_path.insert(0, _TorchFinder())
