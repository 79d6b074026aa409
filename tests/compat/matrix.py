"""The compatibility run: install the package as users do, on each supported pyspark x Python, and smoke it.

For each leg: a fresh virtualenv from that leg's Python, ``pip install <checkout> "pyspark[sql]==X"`` (pip
resolves everything else, as for a user), then ``smoke.py`` with that virtualenv's python, from outside the
checkout. A leg whose Python cannot be found is SKIPPED, loudly; ``--require-all`` makes that a failure.
Prints a summary table; exits 1 when any leg failed.

    python tests/compat/matrix.py                 # every leg (make test-compat)
    python tests/compat/matrix.py --only 4.0.5    # legs of one pyspark version (repeatable)

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

INSTALL_TIMEOUT_S = 1200
SMOKE_TIMEOUT_S = 900


@dataclass
class Outcome:
    """What happened to one leg."""

    leg: Leg
    status: str = "FAIL"  # PASS | FAIL | SKIP
    interpreter: str = ""
    install_s: float = 0.0
    smoke_s: float = 0.0
    checks: list[dict[str, object]] = field(default_factory=list)
    reason: str = ""


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


def run_leg(leg: Leg, work: Path) -> Outcome:
    """Create the leg's virtualenv, install as a user does, run the smoke; the virtualenv is removed after."""
    outcome = Outcome(leg)
    python = find_python(leg.python)
    if python is None:
        outcome.status = "SKIP"
        outcome.reason = f"no Python {leg.python} found (tried {', '.join(candidates(leg.python))})"
        _say(f"SKIP pyspark {leg.pyspark} / Python {leg.python}: {outcome.reason}")
        return outcome
    outcome.interpreter = python
    home = work / f"pyspark-{leg.pyspark}-py{leg.python}"
    venv = home / "venv"
    home.mkdir(parents=True)
    try:
        _say(f"pyspark {leg.pyspark} / Python {leg.python} ({python}): installing")
        started = time.monotonic()
        code, out = _run([python, "-m", "venv", str(venv)], log=home / "venv.log", timeout=300, cwd=home)
        vpy = str(venv / "bin" / "python")
        if code == 0:
            install = [vpy, "-m", "pip", "install", "--quiet", str(ROOT), f"pyspark[sql]=={leg.pyspark}"]
            code, out = _run(install, log=home / "install.log", timeout=INSTALL_TIMEOUT_S, cwd=home)
        outcome.install_s = time.monotonic() - started
        if code != 0:
            outcome.reason = (
                f"install failed ({out.strip() or 'exit ' + str(code)}):\n{_tail(home / 'install.log')}"
            )
            return outcome
        _say(f"pyspark {leg.pyspark} / Python {leg.python}: installed in {outcome.install_s:.0f} s, smoke")
        started = time.monotonic()
        code, out = _run([vpy, str(SMOKE)], log=home / "smoke.log", timeout=SMOKE_TIMEOUT_S, cwd=home)
        outcome.smoke_s = time.monotonic() - started
        reports = [line for line in out.splitlines() if line.startswith("{")]
        if reports:
            report = json.loads(reports[-1])
            outcome.checks = report["checks"]
            versions = report["versions"]
            _say("  " + ", ".join(f"{k} {v}" for k, v in versions.items()))
        if code == 0 and outcome.checks and all(c["ok"] for c in outcome.checks):
            outcome.status = "PASS"
        else:
            outcome.reason = f"smoke exited {code}; log tail:\n{_tail(home / 'smoke.log')}"
        return outcome
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def summary(outcomes: list[Outcome]) -> str:
    """The table printed at the end of the run."""
    lines = [
        f"{'pyspark':<9} {'python':<7} {'result':<6} {'install':>8} {'smoke':>7}  checks",
        "-" * 100,
    ]
    for o in outcomes:
        checks = ", ".join(f"{c['name']} {'ok' if c['ok'] else 'FAILED'}" for c in o.checks) or o.reason[:60]
        times = f"{o.install_s:>7.0f}s {o.smoke_s:>6.0f}s"
        lines.append(f"{o.leg.pyspark:<9} {o.leg.python:<7} {o.status:<6} {times}  {checks}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", default=[], help="run only the legs of this pyspark version"
    )
    parser.add_argument(
        "--require-all", action="store_true", help="a skipped leg (no interpreter) fails the run"
    )
    args = parser.parse_args(argv)
    legs = [leg for leg in LEGS if not args.only or leg.pyspark in args.only]
    if not legs:
        parser.error(f"--only matches no leg; legs are {[leg.pyspark for leg in LEGS]}")
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="s2-compat-") as tmp:
        for leg in legs:
            outcome = run_leg(leg, Path(tmp))
            outcomes.append(outcome)
            if outcome.status == "FAIL":
                _say(f"FAIL pyspark {leg.pyspark} / Python {leg.python}: {outcome.reason}")
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
