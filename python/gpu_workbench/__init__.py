"""gpu_workbench: the companion GPU Workbench runs beside a PyTorch script.

Shipped inside the extension (nothing to pip install) and put on PYTHONPATH for the jobs it
launches. A torchrun job runs ``python -m gpu_workbench.run script.py args`` on every rank, which
installs the hooks and runs the script unchanged as ``__main__`` (see ``gpu_workbench.run``).

The companion talks to the extension over the channel named by ``GPU_WORKBENCH_CHANNEL``
(``unix:/path/to/socket``): one JSON message per line, never over the script's stdout. Without
that variable it does nothing: importing this package imports nothing else (not even torch), and
``report()`` prints the ``::report::{json}`` line that tuning trials read from stdout.

Works with the user's own torch, 1.13 to current; pure Python 3.7+, standard library only.
"""
import json as _json
import sys as _sys

__all__ = ["report"]
__version__ = "0.1.0"


def report(**metrics):
    """Reports metrics of the run (``report(loss=0.42, accuracy=0.9)``).

    Under the extension (its channel set), a ``report`` message on the channel; otherwise the
    ``::report::{json}`` line on stdout that tuning trials have always read, so a script that
    reports keeps working in a plain terminal, a trial, or a job. Values must be JSON numbers,
    strings, booleans or None; tensors of one element are turned into numbers.
    """
    clean = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and callable(value.item):
            value = value.item()  # a 0-d tensor or numpy scalar
        if not isinstance(value, (int, float, str, bool)) and value is not None:
            raise TypeError("gpu_workbench.report(%s=...): expected a number, string, bool or None, got %s" % (key, type(value).__name__))
        clean[key] = value
    from . import _channel

    channel = _channel.get()
    if channel is None:
        _sys.stdout.write("::report::" + _json.dumps(clean) + "\n")
        _sys.stdout.flush()
        return
    channel.send(dict(_channel.rank_fields(), type="report", metrics=clean))
