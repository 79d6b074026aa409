"""How a simulated query may end without writing every batch: the documented refusals each profile accepts
(an error that names the fix and stops the query for good), and Spark giving up on a micro-batch."""

from __future__ import annotations

from s2_sink.errors import CommitError, ConfigError, FencedError, ReplayMismatchError
from tests.sim._foreign import FOREIGN_TOKEN
from tests.sim._scenario import Scenario

__all__ = ["QueryFailed", "accepted_refusal", "asks_for_a_new_process"]


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
        # The second call of one identity in a micro-batch (without a run id its message also names a
        # restart in a new process, which is not what this is).
        return sc.second in ("same object", "same destination") and "writer_id of its own" in text
    if isinstance(exc, CommitError) and sc.profile == "ledger-reset":
        return "ledger" in text and "delete the streams under" in text
    foreign = isinstance(exc, FencedError | QueryFailed) and FOREIGN_TOKEN in text
    return sc.profile == "foreign-writer" and foreign and "clear the fence" in text


def asks_for_a_new_process(exc: BaseException) -> bool:
    """The refusal of a batch begun again by the writer object that wrote it, where the run id cannot be
    read: a restart in the same process looks like a second call; its fix is a restart in a new process."""
    return isinstance(exc, ConfigError) and "restart it in a new Python process" in str(exc)
