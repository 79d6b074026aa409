"""``python -m tests.sim --seed N`` replays one schedule and prints it; ``--count K`` runs K schedules from
``--seed`` on and reports the first violation (``make sim`` runs 100,000)."""

from __future__ import annotations

import argparse
import sys
import time

from tests.sim._run import run_schedule
from tests.sim._scenario import PROFILES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seed", type=int, default=0, help="the (first) schedule's seed")
    parser.add_argument("--count", type=int, default=1, help="how many schedules, from --seed on")
    parser.add_argument("--profile", choices=PROFILES, default="default")
    parser.add_argument("--keep-going", action="store_true", help="count violations instead of stopping")
    args = parser.parse_args(argv)
    started = time.monotonic()
    bad: list[int] = []
    for seed in range(args.seed, args.seed + args.count):
        outcome = run_schedule(seed, args.profile)
        if args.count == 1:
            print(outcome.report())
            print(f"digest {outcome.digest}")
        if outcome.violation is not None:
            bad.append(seed)
            if args.count > 1:
                print(outcome.report(), file=sys.stderr)
            if not args.keep_going:
                break
        done = seed - args.seed + 1
        if args.count > 1 and done % 1000 == 0:
            print(f"{done} schedules, {len(bad)} violations, {time.monotonic() - started:.0f}s", flush=True)
    if args.count > 1:
        print(
            f"{args.profile}: {args.count if args.keep_going or not bad else bad[0] - args.seed + 1} "
            f"schedules in {time.monotonic() - started:.0f}s, violations at seeds {bad[:20]}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
