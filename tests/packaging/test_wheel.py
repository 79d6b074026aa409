"""The built distribution, installed into a fresh virtualenv, is complete and runs.

The wheel is built the way `make dist` builds it (sdist first, then the wheel from the sdist), from the
files git tracks, so an untracked work-in-progress file cannot hide a missing one. The virtualenv is clean:
it does not see this project's environment. Its dependencies come from the configured package index,
constrained to the versions installed here so the smoke pipeline runs against the versions the rest of the
suite tested.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import s2_sink

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMOKE = Path(__file__).with_name("smoke_installed.py")
ENTRY_POINTS = Path(__file__).with_name("spark_entry_points.py")
# What pip prints when no package index can be reached: the check cannot run there, which is not a defect.
_OFFLINE_HINTS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ProxyError",
)


def _source_files() -> list[Path]:
    """The files a fresh clone has: git's tracked files when this is a checkout, else the whole tree."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
    return [Path(name) for name in out.split("\0") if name and (ROOT / name).is_file()]


def _package_files(files: list[Path]) -> set[str]:
    return {
        p.as_posix()
        for p in files
        if p.parts[0] == "s2_sink" and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def tracked() -> list[Path]:
    """Relative paths of the project files a fresh clone would have."""
    return _source_files()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, tracked: list[Path]) -> Path:
    """A copy of the tracked files: what a fresh clone has."""
    src = tmp_path_factory.mktemp("src")
    for rel in tracked:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    return src


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory, source: Path) -> dict[str, Path]:
    """Build sdist and wheel from a copy of the tracked files, as `make dist` does."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 and any(h in proc.stdout + proc.stderr for h in _OFFLINE_HINTS):
        pytest.skip("no package index reachable to fetch the build backend")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def _constraints(path: Path) -> Path:
    """Pin every distribution installed here (except this project) so the venv gets the tested versions."""
    pins = sorted(
        f"{d.metadata['Name']}=={d.version}"
        for d in metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower().replace("_", "-") != "s2-sink"
    )
    path.write_text("\n".join(pins) + "\n")
    return path


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _pip_install(py: Path, *requirements: str, constraints: Path) -> None:
    proc = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "-c", str(constraints), *requirements],
        capture_output=True,
        check=False,
        text=True,
        env=_clean_env(),
        timeout=600,
    )
    if proc.returncode != 0 and any(h in proc.stdout + proc.stderr for h in _OFFLINE_HINTS):
        pytest.skip("no package index reachable to install the wheel's dependencies")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory, dist: dict[str, Path]) -> Path:
    """A new virtualenv without system site-packages holding the wheel with its `lite` extra, as the README's
    base install: no pyspark."""
    home = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(home)
    py = home / "bin" / "python"
    _pip_install(py, f"{dist['wheel']}[lite]", constraints=_constraints(home / "constraints.txt"))
    return py


@pytest.fixture(scope="module")
def base_report(base_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the base install does without pyspark: its distributions, the `s2-sink` command's help, the
    lite server started by its console script and listed through `s2-sink`, and what `import s2_sink`
    and its Spark entry points say. Runs before `spark_venv` adds pyspark to the same virtualenv."""
    bin_dir = base_venv.parent
    cwd = tmp_path_factory.mktemp("base-run")  # not the repo: the source tree must not shadow the package
    env = _clean_env()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, capture_output=True, check=False, text=True, cwd=cwd, env=env, timeout=120
        )

    listed = run(str(base_venv), "-m", "pip", "list", "--format=json").stdout
    report: dict[str, Any] = {"installed": {d["name"].lower() for d in json.loads(listed)}}
    report["help"] = run(str(bin_dir / "s2-sink"), "--help")
    report["import"] = run(str(base_venv), str(ENTRY_POINTS))
    lite = subprocess.Popen(
        [str(bin_dir / "s2-sink-lite"), "--port", "0", "--basin", "base-install"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=env,
    )
    try:
        assert lite.stdout is not None
        endpoint = lite.stdout.readline().strip()
        report["lite_endpoint"] = endpoint
        flags = ["--endpoint", endpoint, "--basin", "base-install"]
        report["streams"] = run(str(bin_dir / "s2-sink"), "streams", "list", *flags)
        report["upsert_tail"] = run(str(bin_dir / "s2-sink"), "tail", "s", "--format", "upsert", *flags)
    finally:
        lite.terminate()
        lite.wait(timeout=30)
    return report


@pytest.fixture(scope="module")
def clean_venv(base_venv: Path, base_report: dict[str, Any], dist: dict[str, Path]) -> Path:
    """The same virtualenv with the `spark` extra added (pyspark and what it needs), after `base_report`."""
    _pip_install(
        base_venv, f"{dist['wheel']}[lite,spark]", constraints=_constraints(base_venv.parent / "cons.txt")
    )
    return base_venv


def test_wheel_ships_every_package_file(dist: dict[str, Path], tracked: list[Path]) -> None:
    """Every tracked file under s2_sink/ (modules, py.typed, any data file) is in the wheel, nothing else."""
    with zipfile.ZipFile(dist["wheel"]) as zf:
        shipped = {n for n in zf.namelist() if n.startswith("s2_sink/")}
    expected = _package_files(tracked)
    assert "s2_sink/py.typed" in expected
    assert expected - shipped == set(), "missing from the wheel"
    assert shipped - expected == set(), "in the wheel but not tracked"


def test_sdist_rebuilds_the_package(dist: dict[str, Path], tracked: list[Path]) -> None:
    """The sdist carries the package, pyproject.toml and README.md, so a wheel can be rebuilt from it."""
    with tarfile.open(dist["sdist"]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md"} <= names
    assert _package_files(tracked) - names == set()


def test_version_comes_from_the_one_place(dist: dict[str, Path]) -> None:
    """The wheel's metadata version and file names equal s2_sink._version.__version__."""
    version = s2_sink.__version__
    assert dist["wheel"].name.startswith(f"s2_sink-{version}-")
    assert dist["sdist"].name == f"s2_sink-{version}.tar.gz"
    with zipfile.ZipFile(dist["wheel"]) as zf:
        meta = zf.read(f"s2_sink-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in meta


def test_installed_wheel_imports_and_runs(clean_venv: Path, tmp_path: Path) -> None:
    """In the clean venv every module imports from the installed wheel and a tiny pipeline runs end to end.

    Missing package data or an undeclared dependency fails here: the venv holds only declared dependencies.
    """
    env = _clean_env()
    proc = subprocess.run(
        [str(clean_venv), str(SMOKE)],
        capture_output=True,
        check=False,
        text=True,
        cwd=tmp_path,  # not the repo: the source tree must not shadow the installed package
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).is_relative_to(report["prefix"]), report["file"]
    assert report["version"] == s2_sink.__version__
    assert report["py_typed"] is True
    assert "s2_sink.errors" in report["modules"]
    if "s2_sink.lite" in report["modules"]:
        assert report["sdk_records"] == 10
    if "S2Writer" in s2_sink.__all__:
        assert report["writer_records"] == 50


def test_base_install_runs_without_pyspark(base_report: dict[str, Any]) -> None:
    """The wheel with its `lite` extra brings no pyspark and no pandas (a platform with its own Spark keeps
    it); `import s2_sink`, the `s2-sink` command and the lite server's `s2-sink-lite` script run there, and
    each Spark entry point raises an ImportError naming the `spark` extra."""
    assert {"s2-sink", "s2-sdk", "h11"} <= base_report["installed"]
    assert not {"pyspark", "pandas", "py4j"} & base_report["installed"]
    assert base_report["help"].returncode == 0, base_report["help"].stderr
    assert "usage: s2-sink" in base_report["help"].stdout
    imported = base_report["import"]
    assert imported.returncode == 0, imported.stderr
    said = json.loads(imported.stdout.strip().splitlines()[-1])
    assert said["version"] == s2_sink.__version__
    assert set(said["said"]) == {"S2Writer", "S2DataSource", "UpsertEncoder", "decode_json", "register"}
    for name, message in said["said"].values():
        assert name == "pyspark"
        assert "pip install 's2-sink[spark]'" in message
    assert base_report["lite_endpoint"].startswith("http://127.0.0.1:")
    assert base_report["streams"].returncode == 0, base_report["streams"].stderr
    assert "basin 'base-install': 0 streams" in base_report["streams"].stdout
    assert base_report["upsert_tail"].returncode == 2
    assert "pip install 's2-sink[spark]'" in base_report["upsert_tail"].stderr


def test_bundle_artifacts_build_in_a_readme_venv(base_venv: Path, source: Path) -> None:
    """The Databricks bundle's artifact builds (examples/databricks/databricks.yml) run as `databricks bundle
    deploy` runs them, with the python of a virtualenv holding only the README's install (no `build`
    module), and leave the s2-sink wheel and the job's wheel in the bundle's dist/."""
    import yaml

    bundle_dir = source / "examples" / "databricks"
    artifacts = yaml.safe_load((bundle_dir / "databricks.yml").read_text())["artifacts"]
    env = {**_clean_env(), "PATH": f"{base_venv.parent}{os.pathsep}{os.environ['PATH']}"}
    env["VIRTUAL_ENV"] = str(base_venv.parent.parent)
    no_build = subprocess.run(
        [str(base_venv), "-c", "import build"], capture_output=True, check=False, cwd=base_venv.parent
    )
    assert no_build.returncode != 0, "the README venv has `build`: this test would not show it is needed"
    for name, artifact in artifacts.items():
        proc = subprocess.run(
            artifact["build"],
            shell=True,
            cwd=(bundle_dir / artifact["path"]).resolve(),
            capture_output=True,
            check=False,
            text=True,
            env=env,
            timeout=300,
        )
        if proc.returncode != 0 and any(h in proc.stdout + proc.stderr for h in _OFFLINE_HINTS):
            pytest.skip("no package index reachable to fetch the build backend")
        assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    built = sorted(p.name.split("-")[0] for p in (bundle_dir / "dist").glob("*.whl"))
    assert built == ["s2_orders_job", "s2_sink"]
