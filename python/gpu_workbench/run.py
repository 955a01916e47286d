"""``python -m gpu_workbench.run script.py args...``: the script, run as ``python script.py args...`` would.

Installs the companion's hooks (when GPU Workbench's channel is set), then runs the script as
``__main__``: the same sys.argv (``script.py args...``), ``__file__``, sys.path[0] (the script's
folder), exit code, and an uncaught exception's traceback starting at the script's own frames.
"""
import os
import sys


def _usage():
    sys.stderr.write("usage: python -m gpu_workbench.run script.py [args...]\n")
    return 2


def _main_module(path):
    import types
    from importlib.machinery import SourceFileLoader

    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__loader__ = SourceFileLoader("__main__", path)
    module.__spec__ = None
    module.__package__ = None
    module.__cached__ = None
    module.__builtins__ = __builtins__
    return module


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help") and len(sys.argv) == 2:
        return _usage()
    script = sys.argv[1]
    try:
        with open(script, "rb") as f:
            source = f.read()
    except OSError as err:
        # What `python script.py` says, and its exit code.
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (sys.executable, os.path.abspath(script) if sys.version_info >= (3, 9) else script, err.errno, err.strerror))
        return 2
    # Python >= 3.9 makes the main script's __file__ (and its code's file name) absolute.
    path = os.path.abspath(script) if sys.version_info >= (3, 9) else script
    sys.argv = sys.argv[1:]
    # `python -m` put the working folder first on sys.path; `python script.py` puts the script's
    # (neither with -P / PYTHONSAFEPATH, Python >= 3.11).
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = os.path.dirname(os.path.realpath(script))

    from . import _channel, _hooks, _trial

    channel = _channel.get()
    if channel is not None:
        channel.send(dict(_channel.rank_fields(), type="hello", pid=os.getpid(), script=path, python=sys.version.split()[0], companion=_companion_version()))
    _hooks.install()

    code = compile(source, path, "exec", dont_inherit=True)
    module = _main_module(path)
    ourselves = sys.modules["__main__"]
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as err:
        # Uncaught: printed as Python prints it, without this wrapper's frame, exit code 1.
        tb = err.__traceback__
        if tb is not None and tb.tb_frame.f_code is main.__code__:
            tb = tb.tb_next
        err = err.with_traceback(tb)
        try:
            _trial.report_failure(err)  # out of memory: a message on the channel, then printed as Python does
        except Exception:  # never hide the script's own error
            pass
        sys.last_type, sys.last_value, sys.last_traceback = type(err), err, tb
        sys.excepthook(type(err), err, tb)
        return 1
    finally:
        del ourselves  # kept alive while the script runs: its functions' globals
    return 0


def _companion_version():
    from . import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
