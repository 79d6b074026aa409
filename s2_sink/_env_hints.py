"""Words for a missing access token that say where the ``S2_*`` variables were and were not seen:
``format("s2")`` validates options in a Python worker started with the session's starting environment, so
`register` hands the worker the names (never the values) of variables exported in the driver since; and with
no exports at all the token is the S2 cloud's, which someone who meant the lite server does not expect.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

__all__ = ["DRIVER_ONLY_VAR", "ENV_VARS", "driver_only_vars", "missing_token", "passing_driver_only_vars"]

log = logging.getLogger(__name__)

OPTION_OF: Final = {
    "S2_ACCESS_TOKEN": "s2.auth-token",
    "S2_ACCOUNT_ENDPOINT": "s2.endpoints.account",
    "S2_BASIN_ENDPOINT": "s2.endpoints.basin",
}
ENV_VARS: Final = tuple(OPTION_OF)
DRIVER_ONLY_VAR: Final = "S2_SINK_DRIVER_ONLY_ENV"
"""Set by `register` in the environment of format("s2")'s Python workers: the comma-separated names of the
``S2_*`` variables the driver had and the workers did not."""


def driver_only_vars(spark: Any) -> list[str]:
    """The ``S2_*`` variables this driver process has and Spark's Python workers' environment (the JVM's plus
    ``spark.executorEnv.*``) lacks; none under Spark Connect."""
    try:
        sc = spark.sparkContext
        jvm_env = sc._jvm.System.getenv()
        executor_env = dict(sc.environment)
    except AttributeError:  # Spark Connect: no SparkContext (PySparkAttributeError); no JVM here: none
        return []
    return [
        name
        for name in ENV_VARS
        if os.environ.get(name) and not jvm_env.get(name) and not executor_env.get(name)
    ]


@contextmanager
def passing_driver_only_vars(spark: Any) -> Iterator[list[str]]:
    """While registering a data source: tell its workers the names of the variables they lack, and warn here,
    where the fix can still be applied."""
    names = driver_only_vars(spark)
    if not names:
        yield names
        return
    log.warning(
        "s2_sink: %s set in this driver process after the Spark session started: format('s2') runs in "
        "Python workers started with the session's environment, which do not see %s; set the variables "
        "before the session starts, or pass %s as options",
        ", ".join(names),
        "it" if len(names) == 1 else "them",
        ", ".join(OPTION_OF[n] for n in names),
    )
    env = spark.sparkContext.environment
    before = env.get(DRIVER_ONLY_VAR)
    env[DRIVER_ONLY_VAR] = ",".join(names)
    try:
        yield names
    finally:  # only the data source's function carries it, not every UDF registered later
        if before is None:
            env.pop(DRIVER_ONLY_VAR, None)
        else:
            env[DRIVER_ONLY_VAR] = before


def _unseen_words(missing: list[str]) -> str:
    """In a Spark worker: which of the `missing` variables the driver had (`DRIVER_ONLY_VAR`), and the fix."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or not str(spec.name).startswith("pyspark."):
        return ""
    flagged = set(os.environ.get(DRIVER_ONLY_VAR, "").split(","))
    seen = [n for n in missing if n in flagged]
    named = seen or missing
    one = len(named) == 1
    fix = (
        f"set the variables before the Spark session starts (or pass them with spark.executorEnv.<NAME>), "
        f"or pass the options {', '.join(OPTION_OF[n] for n in named)}"
    )
    where = (
        f"this process (pid {os.getpid()}) is a Python worker Spark started with the environment of the "
        "session's start"
    )
    if seen:
        return (
            f". {', '.join(named)} {'is' if one else 'are'} set in the driver process but not here: {where}, "
            f"before {'it was' if one else 'they were'} set; {fix}"
        )
    return (
        f". {', '.join(named)} {'is' if one else 'are'} not set in this process: {where}, so a variable set "
        f"in the driver after that is not seen here; {fix}"
    )


def missing_token(account_endpoint: str, basin_endpoint: str, cloud_account: str, cloud_basin: str) -> str:
    """The error for a missing token at non-loopback endpoints: which endpoint needs it, whether that is the
    S2 cloud because nothing pointed elsewhere, and (in a Spark worker) which variables it did not see."""
    account_default = account_endpoint == cloud_account and not os.environ.get("S2_ACCOUNT_ENDPOINT")
    basin_default = basin_endpoint == cloud_basin and not os.environ.get("S2_BASIN_ENDPOINT")
    head = f"access_token (s2.auth-token) is required for non-loopback endpoints (here {account_endpoint})"
    if account_default and basin_default:
        head += (
            ": no endpoint is configured (no s2.endpoints.account / s2.endpoints.basin option, and "
            "S2_ACCOUNT_ENDPOINT / S2_BASIN_ENDPOINT unset in this process), so the endpoints fell back to "
            f"the default, the S2 cloud ({cloud_account}); for a lite server set S2_ACCOUNT_ENDPOINT and "
            "S2_BASIN_ENDPOINT to its endpoint (e.g. http://127.0.0.1:8080), for the cloud set "
            "S2_ACCESS_TOKEN"
        )
    else:
        head += "; set it or the S2_ACCESS_TOKEN environment variable"
    defaults = {"S2_ACCOUNT_ENDPOINT": account_default, "S2_BASIN_ENDPOINT": basin_default}
    return head + _unseen_words(["S2_ACCESS_TOKEN", *(name for name, unset in defaults.items() if unset)])
