"""The compatibility run: install the package as users do, on each supported pyspark x Python, and smoke it.

For each leg: a fresh virtualenv from that leg's Python, ``pip install "<checkout>[spark,lite]"
"pyspark[sql]==X"`` (the README's local install; pip resolves everything else, as for a user), then
``smoke.py`` with that virtualenv's python, from outside the checkout. A leg whose Python cannot be found is
SKIPPED, loudly; ``--require-all`` makes that a failure.
Prints a summary table; exits 1 when any leg failed.

    python tests/compat/matrix.py                 # every leg (make test-compat)
    python tests/compat/matrix.py --only 4.0.5    # legs of one pyspark version (repeatable)
    python tests/compat/matrix.py --only dbr-15.4 # one Databricks runtime leg (repeatable)

The Databricks legs (``DATABRICKS_LEGS``) emulate a runtime's Python environment instead: the virtualenv
first gets the runtime's own pins (``tests/compat/databricks/<name>.txt``: pyspark at the runtime's Spark
version, protobuf, grpcio, pyarrow, numpy, pandas, ...; plus ``pyspark[connect]`` for a serverless client),
then the pinned dependencies of the Databricks recipe (``examples/databricks/requirements.txt``) and the built
wheel in one plain ``pip install``, in the order the recipe and the bundle list them, as Databricks installs
cluster libraries or a serverless environment's dependencies (pip moves what the wheel needs, e.g. protobuf
5 -> 6, and reports the conflicts it leaves; the leg fails if it moved the runtime's pyspark, pyarrow, numpy
or pandas), then the smoke: classic, ``--connect`` (a local Spark Connect server), or ``--client``
(the client environment only).

Interpreters are looked up in this order: ``S2_COMPAT_PYTHON_3_12=/path/to/python`` (one per minor), pyenv's
versions (``$PYENV_ROOT`` or ``~/.pyenv``), ``python3.12`` on PATH, ``/usr/bin`` and ``/usr/local/bin``; each
candidate must run and report that minor version. Standard library only: any Python 3.11+ runs this driver.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = Path(__file__).with_name("smoke.py")
# The Databricks recipe's pins: the docs, the bundle and these legs install them, then the wheel.
DATABRICKS_REQUIREMENTS = ROOT / "examples" / "databricks" / "requirements.txt"
# What a runtime ships that installing s2-sink must leave as it is.
RUNTIME_KEPT = ("pyspark", "pyarrow", "numpy", "pandas")


@dataclass(frozen=True)
class Leg:
    """One pyspark release on one Python minor version."""

    pyspark: str
    python: str


# Each pyspark line once (the newest patch of each), each Python at least once, every pair one that pyspark
# supports upstream: pyspark 3.5 declares Python <= 3.11 and its numpy<2 pin has no wheels for 3.13.
LEGS = (
    Leg("3.5.9", "3.11"),
    Leg("4.0.5", "3.12"),
    Leg("4.1.4", "3.12"),
    Leg("4.3.0", "3.13"),
)


@dataclass(frozen=True)
class RuntimeLeg:
    """One Databricks runtime's (or serverless environment's) Python environment, emulated."""

    name: str  # the pins: tests/compat/databricks/<name>.txt
    label: str  # the runtimes it stands for (two share a leg where their pins are the same)
    python: str
    smokes: tuple[str, ...] = (
        "classic",
    )  # smoke.py modes: classic, quick (no worker kills), connect, client
    # Continue in this earlier leg's virtualenv (same Python and pyspark), this leg's pins installed over it,
    # rather than install pyspark again. Its pins list every package in which the two environments differ.
    base: str = ""

    @property
    def constraints(self) -> Path:
        return PINS / f"{self.name}.txt"

    @property
    def pyspark(self) -> str:
        """The runtime's Spark version, from its pins."""
        found = re.search(r"^pyspark==(\S+)", self.constraints.read_text(), re.MULTILINE)
        if found is None:
            raise SystemExit(f"{self.constraints} pins no pyspark")
        return found.group(1)


PINS = Path(__file__).with_name("databricks")
# Serverless v2 and v3 are Spark 3.5 Connect clients: pyspark 3.5 starts a local Connect server only with the
# spark-connect jar fetched from Maven, so those legs check the client environment (``--client``), each in
# the virtualenv of the runtime with its pyspark and Python (15.4: 3.5.0 / 3.11; 16.4: 3.5.2 / 3.12).
DATABRICKS_LEGS = (
    RuntimeLeg("dbr-15.4", "DBR 15.4 LTS", "3.11"),
    RuntimeLeg("serverless-v2", "serverless v2", "3.11", ("client",), base="dbr-15.4"),
    RuntimeLeg("dbr-16.4", "DBR 16.4 LTS", "3.12"),
    RuntimeLeg("serverless-v3", "serverless v3", "3.12", ("client",), base="dbr-16.4"),
    # Their worker-killed checks run on the pyspark 4.0.5 and 4.1.4 legs; 15.4 and 16.4 keep theirs (the
    # replay reads back through the oldest pyarrow and numpy the package allows).
    RuntimeLeg("dbr-17.3", "DBR 17.3 LTS + serverless v4", "3.12", ("quick", "connect")),
    RuntimeLeg("dbr-18", "DBR 18 LTS", "3.12", ("quick",)),
)

INSTALL_TIMEOUT_S = 1200
SMOKE_TIMEOUT_S = 900


@dataclass
class Outcome:
    """What happened to one leg."""

    leg: Leg | RuntimeLeg
    status: str = "FAIL"  # PASS | FAIL | SKIP
    interpreter: str = ""
    install_s: float = 0.0
    smoke_s: float = 0.0
    checks: list[dict[str, object]] = field(default_factory=list)
    reason: str = ""
    conflicts: list[str] = field(default_factory=list)  # what pip said it left inconsistent

    @property
    def name(self) -> str:
        return self.leg.name if isinstance(self.leg, RuntimeLeg) else self.leg.pyspark


def _say(message: str) -> None:
    print(f"[compat] {message}", flush=True)


def _reports_minor(python: str, minor: str) -> bool:
    """``python`` runs, is ``minor`` (e.g. "3.12") and has the venv module."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == minor


def _patch_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.name))


def candidates(minor: str) -> list[str]:
    """Interpreters that may be Python ``minor``, most specific first."""
    found: list[str] = []
    override = os.environ.get(f"S2_COMPAT_PYTHON_{minor.replace('.', '_')}")
    if override:
        found.append(override)
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    for root in dict.fromkeys(r for r in roots if r):
        versions = Path(root) / "versions"
        if versions.is_dir():
            matches = [
                p for p in versions.glob(f"{minor}.*") if re.fullmatch(rf"{re.escape(minor)}\.\d+", p.name)
            ]
            found += [str(p / "bin" / "python") for p in sorted(matches, key=_patch_key, reverse=True)]
    on_path = shutil.which(f"python{minor}")
    if on_path:
        found.append(on_path)
    found += [f"/usr/bin/python{minor}", f"/usr/local/bin/python{minor}"]
    return list(dict.fromkeys(found))


def find_python(minor: str) -> str | None:
    """The first candidate that really is Python ``minor`` with venv support, or None."""
    return next((c for c in candidates(minor) if _reports_minor(c, minor)), None)


def _clean_env() -> dict[str, str]:
    # The leg must see only its own virtualenv: no inherited venv, PYTHONPATH or Spark interpreter choice.
    drop = {
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "SPARK_HOME",
    }
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(cmd: list[str], *, log: Path, timeout: float, cwd: Path) -> tuple[int, str]:
    """Run ``cmd`` in its own process group (so a timeout also ends the JVM it started); stdout returned,
    stderr kept in ``log``."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=_clean_env(),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return -1, f"timed out after {timeout:.0f} s"
    return proc.returncode, out


def _tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _install_commands(leg: Leg | RuntimeLeg, vpy: str, work: Path) -> list[tuple[str, list[str]]]:
    """The pip steps of a leg, each named for its log file."""
    pip = [vpy, "-m", "pip", "install", "--quiet", "--no-compile"]
    if isinstance(leg, Leg):
        return [("install", [*pip, f"{ROOT}[spark,lite]", f"pyspark[sql]=={leg.pyspark}"])]
    # A leg that runs the Connect smoke keeps pip's bytecode compile: a Connect server gives the Python
    # process it starts for foreachBatch 10 s to connect back, and compiling pandas and pyarrow on first
    # import under load took longer (failed thrice at load average 18; compiled installs passed).
    compiled = [arg for arg in pip if "connect" not in leg.smokes or arg != "--no-compile"]
    runtime = [*compiled, "-r", str(leg.constraints)]
    if not {"classic", "quick"} & set(leg.smokes):  # serverless only: its Spark Connect client, same pins
        runtime += ["-c", str(leg.constraints), f"pyspark[connect]=={leg.pyspark}"]
    wheels = work / "wheel"
    steps = [("runtime", runtime)]
    if not any(wheels.glob("*.whl")):
        steps.append(
            ("wheel", [vpy, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(ROOT)])
        )
    # As Databricks installs the recipe's libraries or an environment's dependencies: the pins, then the
    # wheel, pip resolving (no --no-deps: the wheel does not depend on pyspark, so the runtime's stays).
    library = [*compiled, "-r", str(DATABRICKS_REQUIREMENTS), str(wheels / "s2_sink-*.whl")]
    return [*steps, ("library", library)]


def runtime_moved(leg: RuntimeLeg, vpy: str, home: Path) -> list[str]:
    """The runtime's packages (``RUNTIME_KEPT``) whose installed version is no longer the runtime's pin."""
    pins = dict(
        line.split("==", 1)
        for line in leg.constraints.read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    probe = (
        "import json, sys; from importlib import metadata as m; "
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    kept = [name for name in RUNTIME_KEPT if name in pins]
    code, out = _run([vpy, "-c", probe, *kept], log=home / "kept.log", timeout=120, cwd=home)
    if code != 0:
        return [f"could not read the installed versions: {_tail(home / 'kept.log')}"]
    installed = json.loads(out.strip().splitlines()[-1])
    return [f"{n} {pins[n]} -> {installed[n]}" for n in kept if installed[n] != pins[n]]


def _expand(cmd: list[str]) -> list[str]:
    return [str(next(iter(Path(c).parent.glob(Path(c).name)), c)) if "*" in c else c for c in cmd]


def _pip_conflicts(log: Path) -> list[str]:
    """What pip reported leaving inconsistent (it installs anyway): grpcio-status 1.67 wants protobuf<6."""
    return [
        line.split(", but you have")[0] for line in log.read_text().splitlines() if "but you have" in line
    ]


def _smoke(outcome: Outcome, vpy: str, home: Path, mode: str) -> bool:
    """Run one smoke mode; its checks join the outcome's. True when it ran and every check passed."""
    args = [] if mode == "classic" else [f"--{mode}"]
    code, out = _run(
        [vpy, str(SMOKE), *args], log=home / f"smoke-{mode}.log", timeout=SMOKE_TIMEOUT_S, cwd=home
    )
    reports = [line for line in out.splitlines() if line.startswith("{")]
    checks: list[dict[str, object]] = []
    if reports:
        report = json.loads(reports[-1])
        checks = report["checks"]
        _say("  " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    outcome.checks += checks
    if code == 0 and checks and all(c["ok"] for c in checks):
        return True
    outcome.reason += f"smoke {mode} exited {code}; log tail:\n{_tail(home / f'smoke-{mode}.log')}\n"
    return False


def run_leg(leg: Leg | RuntimeLeg, work: Path, *, keep: bool = False) -> Outcome:
    """Create the leg's virtualenv (or take over its base leg's), install as a user does, run the smoke; the
    virtualenv is removed after, unless ``keep`` (a later leg continues in it)."""
    outcome = Outcome(leg)
    what = f"{outcome.name} / Python {leg.python}"
    python = find_python(leg.python)
    if python is None:
        outcome.status = "SKIP"
        outcome.reason = f"no Python {leg.python} found (tried {', '.join(candidates(leg.python))})"
        _say(f"SKIP {what}: {outcome.reason}")
        return outcome
    outcome.interpreter = python
    home = work / f"{outcome.name}-py{leg.python}"
    venv = home / "venv"
    home.mkdir(parents=True)
    base = work / f"{leg.base}-py{leg.python}" / "venv" if isinstance(leg, RuntimeLeg) and leg.base else None
    try:
        _say(f"{what} ({python}): installing")
        started = time.monotonic()
        if base is not None and base.is_dir():
            base.rename(venv)  # a venv's scripts name its path, but `python -m pip` and the smoke do not mind
            code, out = 0, ""
        else:
            code, out = _run([python, "-m", "venv", str(venv)], log=home / "venv.log", timeout=300, cwd=home)
        vpy = str(venv / "bin" / "python")
        step = "venv"
        for step, cmd in _install_commands(leg, vpy, work) if code == 0 else []:
            code, out = _run(_expand(cmd), log=home / f"{step}.log", timeout=INSTALL_TIMEOUT_S, cwd=home)
            if code != 0:
                break
            if step == "library":
                outcome.conflicts = _pip_conflicts(home / "library.log")
        outcome.install_s = time.monotonic() - started
        if code != 0:
            detail = out.strip() or f"exit {code}"
            outcome.reason = f"{step} failed ({detail}):\n{_tail(home / f'{step}.log')}"
            return outcome
        moved = runtime_moved(leg, vpy, home) if isinstance(leg, RuntimeLeg) else []
        if moved:
            outcome.reason = f"installing s2-sink moved the runtime's {', '.join(moved)}"
            return outcome
        _say(f"{what}: installed in {outcome.install_s:.0f} s, smoke")
        for conflict in outcome.conflicts:
            _say(f"  pip left: {conflict}")
        started = time.monotonic()
        smokes = leg.smokes if isinstance(leg, RuntimeLeg) else ("classic",)
        results = [_smoke(outcome, vpy, home, mode) for mode in smokes]
        outcome.smoke_s = time.monotonic() - started
        if all(results):
            outcome.status = "PASS"
        return outcome
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)


def summary(outcomes: list[Outcome]) -> str:
    """The table printed at the end of the run."""
    lines = [
        f"{'leg':<14} {'python':<7} {'result':<6} {'install':>8} {'smoke':>7}  checks",
        "-" * 100,
    ]
    for o in outcomes:
        checks = ", ".join(f"{c['name']} {'ok' if c['ok'] else 'FAILED'}" for c in o.checks) or o.reason[:60]
        times = f"{o.install_s:>7.0f}s {o.smoke_s:>6.0f}s"
        lines.append(f"{o.name:<14} {o.leg.python:<7} {o.status:<6} {times}  {checks}")
        if isinstance(o.leg, RuntimeLeg):
            lines.append(
                f"{'':<14} {o.leg.label}: pyspark {o.leg.pyspark}; pip left: {'; '.join(o.conflicts) or '-'}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run only the legs of this pyspark version or this Databricks leg (dbr-15.4, serverless-v2)",
    )
    parser.add_argument("--no-databricks", action="store_true", help="skip the Databricks runtime legs")
    parser.add_argument(
        "--require-all", action="store_true", help="a skipped leg (no interpreter) fails the run"
    )
    args = parser.parse_args(argv)
    every: list[Leg | RuntimeLeg] = [*LEGS, *([] if args.no_databricks else DATABRICKS_LEGS)]
    legs = [leg for leg in every if not args.only or Outcome(leg).name in args.only]
    if not legs:
        parser.error(f"--only matches no leg; legs are {[Outcome(leg).name for leg in every]}")
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="s2-compat-") as tmp:
        bases = {leg.base for leg in legs if isinstance(leg, RuntimeLeg)}
        for leg in legs:
            outcome = run_leg(leg, Path(tmp), keep=Outcome(leg).name in bases)
            outcomes.append(outcome)
            if outcome.status == "FAIL":
                _say(f"FAIL {outcome.name} / Python {leg.python}: {outcome.reason}")
                for check in outcome.checks:
                    if not check["ok"]:
                        _say(f"  {check['name']}: {check['detail']}")
    print()
    print(summary(outcomes))
    passed = sum(o.status == "PASS" for o in outcomes)
    failed = sum(o.status == "FAIL" for o in outcomes)
    skipped = sum(o.status == "SKIP" for o in outcomes)
    if skipped:
        print(f"\nWARNING: {skipped} leg(s) SKIPPED for want of an interpreter: they were NOT tested.")
    print(f"\ncompat run took {time.monotonic() - started:.0f} s")
    print(f"compat: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or (skipped and args.require_all) else 0


if __name__ == "__main__":
    sys.exit(main())
