"""The compatibility driver's own rules: which interpreter a leg gets, and which legs there are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.compat import matrix

THIS_MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_override_variable_names_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """S2_COMPAT_PYTHON_<minor> wins over every other place an interpreter may be found."""
    monkeypatch.setenv(f"S2_COMPAT_PYTHON_{THIS_MINOR.replace('.', '_')}", sys.executable)
    assert matrix.find_python(THIS_MINOR) == sys.executable


def test_another_minor_is_not_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A candidate must report the leg's minor version itself: a wrong one is skipped, and with none left the
    leg has no interpreter (so it is SKIPPED, not run on the wrong Python)."""
    monkeypatch.setenv("S2_COMPAT_PYTHON_3_99", sys.executable)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert matrix.candidates("3.99")[0] == sys.executable
    assert matrix.find_python("3.99") is None


def test_pyenv_versions_are_found_newest_patch_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Under a pyenv root, 3.12.10 comes before 3.12.9 and 3.120.x is not a 3.12."""
    for name in ("3.12.9", "3.12.10", "3.120.1", "3.12-dev"):
        (tmp_path / "versions" / name / "bin").mkdir(parents=True)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    found = [c for c in matrix.candidates("3.12") if c.startswith(str(tmp_path))]
    assert found == [str(tmp_path / "versions" / v / "bin" / "python") for v in ("3.12.10", "3.12.9")]


def test_legs_cover_every_pyspark_line_and_every_python() -> None:
    """Each supported pyspark line runs at least once and each supported Python at least once."""
    assert {leg.pyspark.rsplit(".", 1)[0] for leg in matrix.LEGS} >= {"3.5", "4.0", "4.1", "4.3"}
    assert {leg.python for leg in matrix.LEGS} >= {"3.11", "3.12", "3.13"}


def test_databricks_legs_pin_what_the_package_touches() -> None:
    """Each Databricks leg's pins file exists and pins, exactly, the Spark version and every library the
    runtime ships that installing s2-sink could move or that it runs on."""
    for leg in matrix.DATABRICKS_LEGS:
        pins = dict(
            line.split("==", 1)
            for line in leg.constraints.read_text().splitlines()
            if line and not line.startswith("#")
        )
        assert {"pyspark", "protobuf", "grpcio", "grpcio-status", "pyarrow", "numpy", "pandas"} <= set(
            pins
        ), leg
        assert leg.pyspark == pins["pyspark"]
        assert set(leg.smokes) <= {"classic", "quick", "connect", "client"}


def test_databricks_legs_cover_each_lts_runtime_and_serverless_version() -> None:
    """DBR 15.4, 16.4, 17.3 and 18 LTS and serverless environments 2 to 4 each have a leg."""
    labels = " + ".join(leg.label for leg in matrix.DATABRICKS_LEGS)
    for runtime in ("DBR 15.4 LTS", "DBR 16.4 LTS", "DBR 17.3 LTS", "DBR 18 LTS"):
        assert runtime in labels
    for version in (2, 3, 4):
        assert f"serverless v{version}" in labels


def test_pip_conflicts_are_read_from_its_report(tmp_path: Path) -> None:
    """The conflicts pip reports after installing the wheel into a runtime become one line each."""
    log = tmp_path / "library.log"
    log.write_text(
        "ERROR: pip's dependency resolver does not currently take into account all the packages that are "
        "installed. This behaviour is the source of the following dependency conflicts.\n"
        "grpcio-status 1.67.0 requires protobuf<6.0dev,>=5.26.1, but you have protobuf 6.33.6 which is "
        "incompatible.\n"
    )
    assert matrix._pip_conflicts(log) == ["grpcio-status 1.67.0 requires protobuf<6.0dev,>=5.26.1"]


def test_a_leg_continues_only_in_an_earlier_leg_with_its_python_and_pyspark() -> None:
    """A leg that takes over another's virtualenv comes after it and has the same Python and pyspark, so
    installing its own pins over that environment changes only what its pins list."""
    earlier: dict[str, matrix.RuntimeLeg] = {}
    for leg in matrix.DATABRICKS_LEGS:
        if leg.base:
            base = earlier[leg.base]
            assert (base.python, base.pyspark) == (leg.python, leg.pyspark), leg
        earlier[leg.name] = leg
