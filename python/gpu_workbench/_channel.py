"""The channel to the extension: ``GPU_WORKBENCH_CHANNEL=unix:/path/to/socket``.

Each process (each torchrun rank) opens its own connection to the Unix socket the launcher
listens on, so the lines of many ranks never interleave, whatever torchrun does with stdout and
stderr (--redirects, --tee). Sends never block training: a line that does not fit in the socket
buffer waits in memory (at most ``MAX_PENDING`` bytes, then whole messages are dropped and
counted) and goes out with the next message or at exit.
"""
import atexit
import errno
import json
import os
import socket
import sys
import time

ENV = "GPU_WORKBENCH_CHANNEL"
PROTOCOL = 1
MAX_PENDING = 1 << 20
#: When the companion started (its import), the origin of the first step's wall time.
STARTED = time.perf_counter()

_channel = None
_looked = False


def rank_fields():
    """Who is talking: torchrun's RANK, LOCAL_RANK and WORLD_SIZE (a plain run is rank 0 of 1)."""
    def num(name, default):
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    return {"rank": num("RANK", 0), "localRank": num("LOCAL_RANK", 0), "worldSize": num("WORLD_SIZE", 1)}


class Channel:
    def __init__(self, path):
        self.path = path
        self.pid = os.getpid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(path)
        self.sock.setblocking(False)
        self.pending = b""
        self.dropped = 0
        atexit.register(self.close)

    def send(self, message):
        # A forked child (a DataLoader worker) shares the parent's socket: it stays quiet.
        if os.getpid() != self.pid or self.sock is None:
            return
        message.setdefault("v", PROTOCOL)
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        if len(self.pending) + len(line) > MAX_PENDING:
            self.dropped += 1
            return
        self.pending += line
        self._flush()

    def _flush(self):
        while self.pending:
            try:
                sent = self.sock.send(self.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                # The extension went away: stop talking, keep training.
                if err.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                    sys.stderr.write("gpu_workbench: the channel to GPU Workbench failed (%s); reporting stops\n" % err)
                self._drop()
                return
            self.pending = self.pending[sent:]

    def _drop(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.sock = None
        self.pending = b""

    def close(self):
        """At exit: what is pending goes out (waiting at most 2 s), then the connection closes."""
        if os.getpid() != self.pid or self.sock is None:
            return
        if self.dropped:
            self.pending += (json.dumps(dict(rank_fields(), v=PROTOCOL, type="dropped", count=self.dropped)) + "\n").encode("utf-8")
        deadline = time.monotonic() + 2
        while self.pending and self.sock is not None and time.monotonic() < deadline:
            self._flush()
            if self.pending:
                time.sleep(0.01)
        if self.sock is not None:
            self._drop()


def get():
    """The channel of this process, connected on first use; None when the variable is unset or unusable."""
    global _channel, _looked
    if _looked:
        return _channel
    _looked = True
    value = os.environ.get(ENV)
    if not value:
        return None
    if not value.startswith("unix:"):
        sys.stderr.write("gpu_workbench: %s=%r is not unix:/path/to/socket; the companion stays off\n" % (ENV, value))
        return None
    try:
        _channel = Channel(value[len("unix:"):])
    except (OSError, AttributeError) as err:  # AttributeError: no AF_UNIX on this platform
        sys.stderr.write("gpu_workbench: cannot reach GPU Workbench's channel %s (%s); the companion stays off\n" % (value, err))
        _channel = None
    return _channel
