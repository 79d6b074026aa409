"""The Databricks Asset Bundle example (examples/databricks/databricks.yml) is a deployable shape: wheel tasks
calling an entry point that exists, the token only as a secret reference, pinned serverless dependencies, and
task parameters the entry point accepts."""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "databricks"
SECRET_REF = re.compile(r"^\{\{secrets/[\w.-]+/[\w.-]+\}\}$")


@pytest.fixture(scope="module")
def bundle() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / "databricks.yml").read_text())
    return doc


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    return tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]


def _tasks(bundle: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(name, job, task) for name, job in bundle["resources"]["jobs"].items() for task in job["tasks"]]


def _with_defaults(bundle: dict[str, Any], params: list[str]) -> list[str]:
    """The parameters with ``${var.x}`` replaced as the bundle would (a default, or a stand-in)."""
    variables = bundle["variables"]

    def value(m: re.Match[str]) -> str:
        return str(variables[m.group(1)].get("default", f"<{m.group(1)}>"))

    return [re.sub(r"\$\{var\.(\w+)\}", value, p) for p in params]


def test_every_task_is_a_wheel_task_calling_an_entry_point_that_exists(
    bundle: dict[str, Any], project: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task is a python_wheel_task whose package is the example's distribution and whose entry point is
    one of its [project.scripts], naming a function that imports."""
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    tasks = _tasks(bundle)
    assert tasks
    for name, _, task in tasks:
        wheel_task = task["python_wheel_task"]
        assert wheel_task["package_name"] == project["name"].replace("-", "_"), name
        target = project["scripts"][wheel_task["entry_point"]]
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target
    sys.modules.pop("s2_orders_job.job", None)


def test_task_parameters_are_accepted_by_the_entry_point(
    bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task's parameters parse with the entry point's own argument parser (a misspelt flag fails here,
    not in the first scheduled run)."""
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    from s2_orders_job.job import parser

    for name, _, task in _tasks(bundle):
        args = parser().parse_args(_with_defaults(bundle, task["python_wheel_task"]["parameters"]))
        assert args.writer_id, name
        assert args.checkpoint, name


def test_the_token_reaches_the_job_only_as_a_secret_reference(bundle: dict[str, Any]) -> None:
    """A classic job cluster sets S2_ACCESS_TOKEN from a secret scope ({{secrets/scope/key}}); a serverless
    task, whose environment cannot carry it, names the scope for the entry point to read; no token is
    written out."""
    for name, job, task in _tasks(bundle):
        if "job_cluster_key" in task:
            cluster = next(c for c in job["job_clusters"] if c["job_cluster_key"] == task["job_cluster_key"])
            token = cluster["new_cluster"]["spark_env_vars"]["S2_ACCESS_TOKEN"]
            assert SECRET_REF.match(token), (name, token)
        else:
            params = task["python_wheel_task"]["parameters"]
            assert "--secret-scope" in params, name
    text = (EXAMPLE / "databricks.yml").read_text()
    assert "access_token" not in text
    assert not re.search(r"S2_ACCESS_TOKEN:\s*[^\s\"{]", text)


def test_wheels_the_tasks_install_are_built_by_the_bundle(bundle: dict[str, Any]) -> None:
    """Every local wheel a task installs is one the bundle's artifacts build into the example's dist/."""
    built = {name.replace("-", "_") for name in bundle["artifacts"]}
    assert all("dist" in a["build"] for a in bundle["artifacts"].values())
    wheels: list[str] = []
    for job in bundle["resources"]["jobs"].values():
        wheels += [lib["whl"] for task in job["tasks"] for lib in task.get("libraries", []) if "whl" in lib]
        for env in job.get("environments", []):
            wheels += [d for d in env["spec"]["dependencies"] if d.endswith(".whl")]
    assert wheels
    for wheel in wheels:
        assert wheel.startswith("./dist/"), wheel
        assert wheel.removeprefix("./dist/").split("-")[0] in built, wheel


def test_serverless_environment_is_versioned_and_its_dependencies_pinned(bundle: dict[str, Any]) -> None:
    """A serverless job names its environment version and pins every package dependency with ==, so a
    rebuild of the environment installs what was verified."""
    environments = [
        env for job in bundle["resources"]["jobs"].values() for env in job.get("environments", [])
    ]
    assert environments
    for env in environments:
        spec = env["spec"]
        assert str(spec["environment_version"]) in {"2", "3", "4"}
        packages = [d for d in spec["dependencies"] if not d.endswith(".whl")]
        assert packages
        assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.]+", d) for d in packages), packages
    for job in bundle["resources"]["jobs"].values():
        for task in job["tasks"]:
            for lib in task.get("libraries", []):
                if "pypi" in lib:
                    assert "==" in lib["pypi"]["package"], lib
