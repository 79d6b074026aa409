"""``s2_sink.lite``: a local S2-compatible server (h2c and HTTP/1.1 on one port) for any S2 client.

    from s2_sink.lite import LiteServer

    with LiteServer() as srv:                       # random free port on 127.0.0.1, background thread
        eps = Endpoints(account=srv.endpoint, basin=srv.endpoint)
        ...
    LiteServer(subprocess=True, data_dir="d", faults=True)   # child process; srv.kill() = SIGKILL

Fault hooks (only with ``faults=True`` / ``--allow-faults``): ``srv.faults.fail_next_appends(n, status=503)``,
``srv.faults.drop_connections(after_appends=n, ambiguous=False)``, ``srv.faults.delay_acks(ms)``,
``srv.faults.clear()``, ``srv.faults.counters()``; over HTTP: ``POST /_lite/faults`` / ``GET /_lite/faults``.

``LiteServer(throttle=True)`` (``--throttle``) answers 429 over S2's per-stream append limits;
``LiteServer(clock=ManualClock())`` lets a test move the server's time (throttling windows, retention).
"""

import importlib.util

# The server's own dependencies come with the ``lite`` extra; say so instead of failing deep in an import.
_missing = [name for name in ("h2", "h11", "zstandard") if importlib.util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"s2_sink.lite needs {', '.join(_missing)}, from the 'lite' extra: pip install 's2-sink[lite]'"
    )

from s2_sink.lite._clock import Clock, ManualClock  # noqa: E402
from s2_sink.lite._faults import FaultCounters, Faults, FaultsDisabledError  # noqa: E402
from s2_sink.lite.server import LiteServer, RemoteFaults  # noqa: E402

__all__ = [
    "Clock",
    "FaultCounters",
    "Faults",
    "FaultsDisabledError",
    "LiteServer",
    "ManualClock",
    "RemoteFaults",
]
