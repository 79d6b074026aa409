"""``changed``: the user changes the writer between a failed run and its restart.

Each start of the query runs with a configuration of its own (`RunConfig`, drawn per start from the seed):
the routing (one stream, a stream column, two or three shards), ``on_error`` and the dead-letter stream
(two to choose from), the delivery mode and the write parallelism (the recovery layout's partitions). The
first run dies with its first batch written but not committed (half written when a bad row failed it), and
the first restart changes in three schedules in four what that batch cannot survive (the routing, another
dead-letter stream). The rows carry their stream-column value,
and their target follows the routing of the run that writes them (`retarget`). A run refused for a change
its batch in flight cannot survive is followed by the fix the error names (a restart with the settings it
refused put back as the ledger recorded them, `recorded_config`); a last run under ``on_error="fail"`` with
bad rows left gets the fix that error names (dead letters).

What must hold (`ChangeLog`, kept per store and read by the invariants): a batch the ledger committed holds,
in tagged chunks, exactly the good rows' records the committing configuration makes, in its streams, and its
dead letters exactly under ``dlq`` (at most one per bad row otherwise: dead letters written before a switch to
``skip`` stay); a batch not committed holds no more than some configuration that wrote it makes. At-least-once
runs write untagged records: every batch Spark committed after such a run wrote it is found whole among them
(or in tagged chunks), and they may repeat (what at-least-once means).
"""

from __future__ import annotations

import random
import weakref
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Final

from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink._exactly_once.ledger import ledger_stream_name
from s2_sink._exactly_once.ledger_records import parse_record
from s2_sink._write.spec import Delivery
from s2_sink._write.task.dead_letters import DLQ_BATCH, DLQ_ERROR, DLQ_TARGET
from s2_sink.lite._store import Store
from tests.sim._scenario import DLQ_STREAM, KEY, ROUTED_STREAMS, SINGLE_STREAM, Row, Scenario

__all__ = ["CHANGES", "ChangeLog", "RunConfig", "draw_changed", "records_under", "retarget", "view"]

ROUTINGS: Final = ("single", "column", "shards2", "shards3")
DLQ_STREAMS: Final = (DLQ_STREAM, "dead-2")

Content = tuple[str, tuple[tuple[bytes, bytes], ...], bytes]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """The writer one start of the query runs with."""

    routing: str
    on_error: str
    dlq: str | None
    delivery: Delivery = "exactly-once"
    partitions: int = 2

    def describe(self) -> str:
        dead = f" to {self.dlq}" if self.dlq else ""
        return (
            f"{self.routing}, on_error={self.on_error}{dead}, {self.delivery}, {self.partitions} partitions"
        )

    @property
    def shards(self) -> int | None:
        return int(self.routing[-1]) if self.routing.startswith("shards") else None

    @property
    def routed(self) -> bool:
        return self.routing != "single"

    def writer_kwargs(self) -> dict[str, Any]:
        """`S2Writer`'s keyword arguments for this configuration (the stream column is "target")."""
        return {
            "stream_column": "target" if self.routing == "column" else None,
            "shards": self.shards,
            "on_error": self.on_error,
            "dlq_stream": self.dlq,
            "delivery": self.delivery,
        }

    def completing(self, rows: list[Row]) -> RunConfig:
        """What a last run that must complete runs with: under ``fail`` with bad rows left, the fix the error
        names (dead letters)."""
        if self.on_error != "fail" or all(r.error is None for r in rows):
            return self
        return replace(self, on_error="dlq", dlq=DLQ_STREAM)


def _drawn(rng: random.Random) -> RunConfig:
    on_error = rng.choice(("fail", "skip", "dlq", "dlq"))
    return RunConfig(
        rng.choice(ROUTINGS),
        on_error,
        rng.choice(DLQ_STREAMS) if on_error == "dlq" else None,
        partitions=rng.randint(1, 3),
    )


def _changed(rng: random.Random, c: RunConfig) -> RunConfig:
    what = rng.choice(("routing", "on_error", "on_error", "delivery", "partitions"))
    if what == "routing":
        return replace(c, routing=rng.choice([r for r in ROUTINGS if r != c.routing]))
    if what == "on_error":
        on_error = rng.choice([e for e in ("fail", "skip", "dlq", "dlq-2") if e != c.on_error])
        dlq = {"dlq": DLQ_STREAMS[0], "dlq-2": DLQ_STREAMS[1]}.get(on_error)
        return replace(c, on_error="dlq" if dlq else on_error, dlq=dlq)
    if what == "delivery":
        return replace(c, delivery="at-least-once" if c.delivery == "exactly-once" else "exactly-once")
    return replace(c, partitions=rng.choice([p for p in (1, 2, 3) if p != c.partitions]))


def _first_change(rng: random.Random, c: RunConfig) -> RunConfig:
    """The change the first restart makes, after the first run died with a batch in flight: three in four a
    change that batch cannot survive (the routing, or another dead-letter stream), the rest one it can."""
    pick = rng.random()
    if pick < 0.6 or (pick < 0.75 and c.dlq is None):
        return replace(c, routing=rng.choice([r for r in ROUTINGS if r != c.routing]))
    if pick < 0.75:
        return replace(c, dlq=next(d for d in DLQ_STREAMS if d != c.dlq))
    return _changed(rng, c)


def draw_changed(seed: int) -> Scenario:
    """``changed``: the default draw through ``foreachBatch(S2Writer)``, rows with a stream-column value and
    bad rows, and a configuration per start (one or two settings changed at most restarts)."""
    base = Scenario.draw(seed)
    rng = random.Random(f"changed-{seed}")
    upsert = rng.random() < 0.25
    batches = []
    for rows in base.batches:
        drawn = []
        for row in rows:
            headers = ((KEY, b"k%d" % rng.randrange(3)), (b"@action", b"put")) if upsert else ()
            error = "unencodable value" if rng.random() < 0.15 else None
            drawn.append(Row(row.body, None, headers, error, column=rng.choice(ROUTED_STREAMS)))
        batches.append(tuple(drawn))
    configs = [_drawn(rng), RunConfig("single", "fail", None)]
    configs[1] = _first_change(rng, configs[0])
    for _ in range(8):
        c = configs[-1]
        if rng.random() < 0.7:
            c = _changed(rng, c)
            if rng.random() < 0.3:
                c = _changed(rng, c)
        configs.append(c)
    return replace(
        base,
        profile="changed",
        front="writer",
        batches=tuple(batches),
        upsert=upsert,
        configs=tuple(configs),
        fault_rate=max(base.fault_rate, 0.05),
        max_restarts=max(base.max_restarts, 2),
    )


def retarget(row: Row, routing: str) -> Row:
    """The row as a writer with `routing` makes its frame: its target stream (None: the one stream)."""
    if routing == "single":
        return replace(row, stream=None)
    if routing == "column":
        return replace(row, stream=row.column)
    shards = int(routing[-1])
    hashed = row.headers[0][1] if row.headers else row.body  # Spark hashes the key, else the body
    return replace(row, stream=f"{SINGLE_STREAM}/{sum(hashed) % shards}")


def view(sc: Scenario, config: RunConfig) -> Scenario:
    """The scenario as a start running with `config` writes it: rows retargeted, its partitions."""
    return replace(
        sc,
        batches=tuple(tuple(retarget(r, config.routing) for r in b) for b in sc.batches),
        routed=config.routed,
        shards=config.shards,
        dlq=True,  # the frame carries the encoder's error column whatever on_error does with it
        shuffle_partitions=config.partitions,
    )


def records_under(rows: tuple[Row, ...], batch: int, config: RunConfig) -> Counter[Content]:
    """What `config` makes of the batch's rows: good rows' records in their streams, dead letters under
    ``dlq`` (compared without the headers that say where they were written from, as the fingerprint does)."""
    out: Counter[Content] = Counter()
    for row in rows:
        target = retarget(row, config.routing).stream or SINGLE_STREAM
        if row.error is None:
            out[(target, row.headers, row.body)] += 1
        elif config.on_error == "dlq" and config.dlq is not None:
            headers = (
                (DLQ_ERROR, row.error.encode()),
                (DLQ_BATCH, str(batch).encode()),
                (DLQ_TARGET, target.encode()),
            )
            out[(config.dlq, headers, row.body)] += 1
    return out


def is_dead_letter(content: Content) -> bool:
    return any(name == DLQ_ERROR for name, _ in content[1])


@dataclass
class ChangeLog:
    """What the schedule's starts wrote under which configuration (kept by `tests.sim._spark.Query`)."""

    scenario: Scenario
    wrote: dict[int, list[RunConfig]] = field(default_factory=dict)
    """Per batch, the configurations of the runs that began writing it."""
    committed: dict[int, RunConfig] = field(default_factory=dict)
    """Per batch, the configuration of the exactly-once run that committed it in the ledger (set before the
    commit is appended: a commit that did not land is overwritten by the one that does, or dropped when Spark
    commits the batch after an at-least-once run wrote it: no exactly-once commit of it ever lands, and a
    later commit's ``committed`` passing over it says nothing of its records)."""
    alo: dict[int, RunConfig] = field(default_factory=dict)
    """Per batch Spark committed after an at-least-once run wrote it, that run's configuration."""

    def upper(self, batch: int) -> Counter[Content]:
        """The most a batch may hold in tagged chunks: what the richest configuration that wrote it makes."""
        out: Counter[Content] = Counter()
        for config in self.wrote.get(batch, []):
            out |= records_under(self.scenario.batches[batch], batch, config)
        return out

    def check(self, batch: int, got: Counter[Content], where: str) -> str | None:
        """Why `got` (the batch's tagged records, `where`) breaks the rules of the module docstring, if it
        does; the committed rules when the ledger committed the batch."""
        upper = self.upper(batch)
        extra = got - upper
        if extra:
            return (
                f"{where}: batch {batch} holds records no configuration that wrote it makes: {_show(extra)}"
            )
        config = self.committed.get(batch)
        if config is None:
            return None
        want = records_under(self.scenario.batches[batch], batch, config)
        good = Counter({c: n for c, n in want.items() if not is_dead_letter(c)})
        have = Counter({c: n for c, n in got.items() if not is_dead_letter(c)})
        if have != good:
            why = f"holds {_show(have)}, not {_show(good)}"
            return f"{where}: committed batch {batch} ({config.describe()}) {why}"
        dead_want = want - good
        dead_have = got - have
        if config.on_error == "dlq" and dead_have != dead_want:
            why = f"has dead letters {_show(dead_have)}, not {_show(dead_want)}"
            return f"{where}: committed batch {batch} {why}"
        return None


CHANGES: weakref.WeakKeyDictionary[Store, ChangeLog] = weakref.WeakKeyDictionary()
"""Per store, the schedule's `ChangeLog` (``changed`` only)."""


def _show(c: Counter[Content]) -> str:
    items = sorted(c.items())[:6]
    return ", ".join(f"{n}x {s}:{b!r}" for (s, _, b), n in items) or "nothing"


class ChangeFront:
    """The ``changed`` profile's part of `tests.sim._spark.Query`: the configuration of each start, the fix a
    refused change names, and the `ChangeLog` the invariants read."""

    sc: Scenario
    runs: int
    writer: Any
    query_id: str
    writer_name: str | None
    config: RunConfig | None
    """The configuration of the current start (None outside ``changed``)."""

    def _setup_changes(self, scenario: Scenario, store: Store, basin: str) -> None:
        self.base = scenario
        self.config = None
        self.change_log = ChangeLog(scenario)
        self.fix_config: RunConfig | None = None
        self.last_eo_config: RunConfig | None = None
        self.change_fixes = 0
        self.data_steps = 0
        self.first_died = False
        self.change_store, self.change_basin = store, basin
        if scenario.configs:
            CHANGES[store] = self.change_log

    def _configure(self, run: int, calm: bool) -> bool:
        """Pick the configuration of start `run` (``changed``); whether it differs from the writer's."""
        if not self.base.configs:
            return False
        # The fix holds until a run under it writes (a run refused before writing does not use it up).
        config = self.fix_config or self.base.configs[min(run, len(self.base.configs) - 1)]
        if calm:
            config = config.completing([r for b in self.base.batches for r in b])
        changed = config != self.config
        if changed:
            self._note(f"the query restarts with S2Writer({config.describe()})")
            self.writer = None
        self.config = config
        self.sc = view(self.base, config)
        return changed

    def _first_run_fault(self, actor: Any, op: Any) -> str | None:
        """``changed`` and ``two-drivers``: the first run has no fault but one, its driver's death at its
        first ledger append after its tasks wrote data, its commit (the batch is written, and in flight,
        when the user changes the writer and restarts; half written where a bad row under
        ``on_error="fail"`` failed it first). None for the other runs' steps."""
        dies = self.base.configs or self.base.profile == "two-drivers"
        if not dies or not (actor.name == "driver0" or actor.name.startswith("r0.")):
            return None
        data = op.kind in ("append", "session") and not op.target.startswith("_s2sink/")
        if actor.role == "task" and data and "fence" not in op.detail:
            self.data_steps += 1
        ledger = op.kind == "append" and op.target.startswith("_s2sink/ledger/")
        if actor.name != "driver0" or not ledger or self.data_steps == 0 or self.first_died:
            return "ok"
        self.first_died = True
        return "crash_before"

    def _wrote(self, batch: int, exactly_once: bool) -> None:
        if self.config is not None:
            self.fix_config = None
            self.change_log.wrote.setdefault(batch, []).append(self.config)
            if exactly_once:
                self.last_eo_config = self.config

    def _committing(self, batch: int) -> None:
        if self.config is not None:
            self.change_log.committed[batch] = self.config

    def _spark_committed(self, batch: int, exactly_once: bool) -> None:
        if self.config is not None and not exactly_once:
            self.change_log.alo[batch] = self.config
            ledger = ledger_stream_name(self.writer_name or self.query_id)
            state = last_state(self.change_store, self.change_basin, ledger)
            if state is None or int(state["committed"]) < batch:
                self.change_log.committed.pop(batch, None)

    def _fix_refused_change(self, exc: BaseException, store: Store, basin: str, ledger: str) -> bool:
        """A change refused for the batch in flight: restart once with the refused settings put back as the
        ledger recorded them (the fix the error names, `recorded_config`), then the drawn changes go on.
        Whether the refusal was such."""
        if self.config is None or "Restart once with" not in str(exc) or self.change_fixes >= 3:
            return False
        self.change_fixes += 1
        self.fix_config = recorded_config(store, basin, ledger, self.config)
        return True


def recorded_config(store: Store, basin: str, ledger: str, like: RunConfig) -> RunConfig:
    """What the user restarts with after a refusal, following the fix the error names: `like` (the refused
    configuration) with what the ledger's last state record says the batch in flight was written under put
    back where `like` changed it past recovery (`check_restart`): the routing, and the dead-letter stream
    where both name one (the shapes name at most one: another is refused). `like`'s ``on_error`` stays, so
    a dead-letter stream the user chose keeps its dead letters where the batch's first ones went."""
    last = last_state(store, basin, ledger)
    assert last is not None, f"{ledger} has no state record"
    assert last.get("shapes"), f"{ledger} records no configuration"
    shapes = last["shapes"]
    route = str(shapes[-1]["routing"])
    routing = "single" if route.startswith("stream=") else "column" if route.startswith("column=") else ""
    routing = routing or f"shards{route.split('=', 1)[1].split('x', 1)[0]}"
    dead = next((str(s["dlq"]) for s in reversed(shapes) if s["dlq"] is not None), None)
    dlq = dead if like.dlq is not None and dead is not None else like.dlq
    return replace(like, routing=routing, dlq=dlq, delivery="exactly-once")


def last_state(store: Store, basin: str, ledger: str) -> dict[str, Any] | None:
    """The ledger's last state record (None: none yet, or no ledger)."""
    if ledger not in store.basin(basin).streams:
        return None
    last: dict[str, Any] | None = None
    for raw in store.stream(basin, ledger).collect(0, 1 << 30, 1 << 62, None).records:
        rec = pb.SequencedRecord.FromString(raw)
        if rec.headers and rec.headers[0].name == b"":
            continue  # a command record
        doc = parse_record(rec.body, ledger)
        if doc["kind"] != "ends":
            last = doc
    return last
