"""``s2_sink.lite``: a local S2-compatible server (HTTP/2 cleartext) that the official ``s2-sdk`` talks to.

    from s2_sink.lite import LiteServer

    with LiteServer() as srv:                       # random free port on 127.0.0.1, background thread
        eps = Endpoints(account=srv.endpoint, basin=srv.endpoint)
        ...
    LiteServer(subprocess=True, data_dir="d", faults=True)   # child process; srv.kill() = SIGKILL

Fault hooks (only with ``faults=True`` / ``--allow-faults``): ``srv.faults.fail_next_appends(n, status=503)``,
``srv.faults.drop_connections(after_appends=n, ambiguous=False)``, ``srv.faults.delay_acks(ms)``,
``srv.faults.clear()``, ``srv.faults.counters()``; over HTTP: ``POST /_lite/faults`` / ``GET /_lite/faults``.
"""

from s2_sink.lite._faults import FaultCounters, Faults, FaultsDisabledError
from s2_sink.lite.server import LiteServer, RemoteFaults

__all__ = ["FaultCounters", "Faults", "FaultsDisabledError", "LiteServer", "RemoteFaults"]
