"""One dependency list for Databricks: the wheel's requirements (pyproject.toml), pinned in
examples/databricks/requirements.txt, and that list, in that order and then the wheel, in docs/databricks.md,
the Asset Bundle's two jobs, notebook 04's job definition and `make test-compat`'s runtime legs.

No network and no Spark: these read the files.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from tests.compat import matrix

ROOT = Path(__file__).resolve().parents[2]
PINS_FILE = ROOT / "examples" / "databricks" / "requirements.txt"
# What every Databricks runtime ships and s2-sink leaves to it.
RUNTIME_PROVIDED = {"pyarrow", "numpy"}


def _name(requirement: str) -> str:
    return Requirement(requirement).name.lower().replace("_", "-")


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


@pytest.fixture(scope="module")
def pins() -> list[str]:
    """The pinned lines of requirements.txt, in order."""
    lines = [line.strip() for line in PINS_FILE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_pyspark_and_pandas_are_extras_not_dependencies(project: dict[str, Any]) -> None:
    """The base install brings neither pyspark nor pandas (a platform's own stay as they are); the `spark`
    extra brings pyspark with its SQL extra and a pandas below 3, which pyspark 4.2+ warns about."""
    names = {_name(req) for req in project["dependencies"]}
    assert not names & {"pyspark", "pandas", "py4j"}
    spark = {_name(req): Requirement(req) for req in project["optional-dependencies"]["spark"]}
    assert spark["pyspark"].extras == {"sql"}
    assert "3.5" in spark["pyspark"].specifier
    assert "3.0.0" not in spark["pandas"].specifier
    assert "2.3.3" in spark["pandas"].specifier


def test_the_pins_are_the_wheels_dependencies_at_versions_it_accepts(
    project: dict[str, Any], pins: list[str]
) -> None:
    """requirements.txt pins exactly the wheel's dependencies less what the runtime ships, each once with ==,
    at a version the wheel's own requirement accepts."""
    declared = {_name(req): Requirement(req) for req in project["dependencies"]}
    pinned = [Requirement(line) for line in pins]
    assert [len(p.specifier) for p in pinned] == [1] * len(pinned)
    assert all(next(iter(p.specifier)).operator == "==" for p in pinned), pins
    names = [_name(line) for line in pins]
    assert len(names) == len(set(names))
    assert set(names) == set(declared) - RUNTIME_PROVIDED
    for pin in pinned:
        version = next(iter(pin.specifier)).version
        assert version in declared[_name(str(pin))].specifier, (str(pin), str(declared[_name(str(pin))]))


def test_the_bundle_installs_the_pins_then_s2_sink_then_the_job(pins: list[str]) -> None:
    """Both jobs of examples/databricks/databricks.yml list the pins in order, then the s2-sink wheel, then
    the job's wheel (which depends on s2-sink by a name no index has, so s2-sink must be installed first)."""
    bundle = yaml.safe_load((ROOT / "examples" / "databricks" / "databricks.yml").read_text())
    lists: list[list[str]] = []
    for job in bundle["resources"]["jobs"].values():
        for task in job["tasks"]:
            if "libraries" in task:
                lists.append(
                    [lib["pypi"]["package"] if "pypi" in lib else lib["whl"] for lib in task["libraries"]]
                )
        lists += [env["spec"]["dependencies"] for env in job.get("environments", [])]
    assert len(lists) == 2
    for listed in lists:
        assert listed[: len(pins)] == pins
        wheels = [Path(entry).name.split("-")[0] for entry in listed[len(pins) :]]
        assert wheels == ["s2_sink", "s2_orders_job"], listed


def test_the_docs_recipe_installs_the_pins_then_the_wheel(pins: list[str]) -> None:
    """docs/databricks.md's notebook install (the one `%pip install` line naming packages) is the pins, in
    order, then the wheel; no `--no-deps` recipe is left."""
    text = (ROOT / "docs" / "databricks.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("%pip install ")]
    assert len(lines) == 1, lines
    words = lines[0].removeprefix("%pip install ").split()
    assert [w.strip('"') for w in words[:-1]] == pins
    assert re.fullmatch(r"/Volumes/\S+/s2_sink-[\w.]+-py3-none-any\.whl", words[-1]), words[-1]
    assert "pip install --no-deps" not in text


def test_notebook_04_job_definition_installs_the_pins_then_the_wheel(pins: list[str]) -> None:
    """Notebook 04's job definition (its ```yaml block) lists the pins as PyPI libraries, then the wheel."""
    source = (ROOT / "notebooks" / "04_databricks_job.py").read_text()
    lines = [line.removeprefix("# MAGIC").removeprefix(" ") for line in source.splitlines()]
    block = "\n".join(lines[lines.index("```yaml") + 1 : lines.index("```", lines.index("```yaml") + 1)])
    (task,) = yaml.safe_load(block)["tasks"]
    listed = [lib["pypi"]["package"] if "pypi" in lib else lib["whl"] for lib in task["libraries"]]
    assert listed[:-1] == pins
    assert Path(listed[-1]).name.startswith("s2_sink-")


def test_make_test_compat_installs_the_pins_then_the_wheel_on_each_runtime(tmp_path: Path) -> None:
    """Each Databricks leg's library step is one pip install of requirements.txt and then the wheel, without
    --no-deps (so pip resolves the wheel's requirements against the runtime's pins, as Databricks does)."""
    assert matrix.DATABRICKS_REQUIREMENTS == PINS_FILE
    for leg in matrix.DATABRICKS_LEGS:
        steps = dict(matrix._install_commands(leg, "python", tmp_path))
        library = steps["library"]
        assert "--no-deps" not in library
        assert library[-3:-1] == ["-r", str(PINS_FILE)]
        assert Path(library[-1]).name == "s2_sink-*.whl"
