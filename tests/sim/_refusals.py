"""How a simulated query may end without writing every batch: the documented refusals each profile accepts
(an error that names the fix and stops the query for good), and Spark giving up on a micro-batch."""

from __future__ import annotations

from s2_sink.errors import CommitError, ConfigError, FencedError, ReplayMismatchError
from tests.sim._foreign import FOREIGN_TOKEN
from tests.sim._scenario import Scenario

__all__ = ["QueryFailed", "accepted_refusal"]


class QueryFailed(Exception):
    """Spark gave up on the micro-batch (a task failed too often): the query stops with an error."""


def accepted_refusal(sc: Scenario, exc: BaseException) -> bool:
    """A documented refusal that stops the query for good: ``format("s2")``'s ReplayMismatchError; in
    ``several-writers`` a second call of one identity in a micro-batch (ConfigError naming the fix); in
    ``foreign-writer`` the other identity's token on a stream this writer committed to (FencedError naming
    the fix, from the driver or, failing the job, from the tasks); in ``ledger-reset`` a writer whose ledger
    is gone (CommitError naming the fix)."""
    text = str(exc)
    if isinstance(exc, ReplayMismatchError):
        return True
    if isinstance(exc, ConfigError):
        return sc.second in ("same object", "same destination") and "one S2Writer per target" in text
    if isinstance(exc, CommitError) and sc.profile == "ledger-reset":
        return "ledger" in text and "delete the streams under" in text
    foreign = isinstance(exc, FencedError | QueryFailed) and FOREIGN_TOKEN in text
    return sc.profile == "foreign-writer" and foreign and "clear the fence" in text
