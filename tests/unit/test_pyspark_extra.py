"""pyspark is the `spark` extra: without it the package imports, and each Spark entry point says which extra
to install (tests/packaging shows the same in a virtualenv that really has no pyspark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from s2_sink._pyspark import needs_pyspark

ENTRY_POINTS = Path(__file__).resolve().parents[1] / "packaging" / "spark_entry_points.py"


def test_the_spark_entry_points_name_the_extra_and_the_rest_imports() -> None:
    """`import s2_sink`, the lite server and the CLI import without pyspark; S2Writer, register, S2DataSource
    and the encoders raise ModuleNotFoundError(name='pyspark') whose message names the spark extra; the
    record frame's constants, which the CLI uses, load."""
    out = subprocess.run(
        [sys.executable, str(ENTRY_POINTS), "--block-pyspark"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(report["said"]) == {"S2Writer", "register", "S2DataSource", "UpsertEncoder", "decode_json"}
    for name, message in report["said"].values():
        assert name == "pyspark"
        assert "pip install 's2-sink[spark]'" in message
        assert "Databricks" in message
    assert report["body"] == "_s2_body"


def test_a_missing_pyspark_submodule_is_not_called_a_missing_pyspark() -> None:
    """Only pyspark itself missing is reported as the extra; a submodule an older pyspark lacks passes
    through as it was raised (the feature that needs it says so itself)."""
    with pytest.raises(ModuleNotFoundError) as raised, needs_pyspark("x"):
        raise ModuleNotFoundError("No module named 'pyspark.sql.datasource'", name="pyspark.sql.datasource")
    assert raised.value.name == "pyspark.sql.datasource"
    with (
        pytest.raises(ModuleNotFoundError, match=r"x needs pyspark.*s2-sink\[spark\]") as raised,
        needs_pyspark("x"),
    ):
        raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
    assert isinstance(raised.value.__cause__, ModuleNotFoundError)
