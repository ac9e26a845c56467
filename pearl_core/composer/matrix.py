"""The Primitive Device Assignment Matrix (the paper's Table I).

One :class:`DeviceRow` per device. Each row holds per-iteration cells for the
Replay Manager's three operations and the learner when they run on that device
alone, and the same four cells when RM and learner share the device
(co-located, the third column of Table I; the protocol's *setting 2*)::

    row:        rm_sample  rm_update  rm_insert  learner   |  co_rm_sample  co_rm_update  co_rm_insert  co_learner
    (the authors' PT.csv:  RP-sample  RP-update  RP-insert  LN  |  RPLN-RP-sample ... RPLN-LN)

A cell is a :class:`CostCell`: seconds per iteration, the device's power while
it runs (W), and where the number came from (``"profiled"``, ``"analytic"``,
``"given"``). A missing cell (``None``) means the primitive cannot run there
(e.g. an RM and learner that do not fit one FPGA together); the row's
``notes`` say why.

A row the composer measured on the host may also carry :class:`DeviceCosts`: the named
measurements behind its cells (an actor's step, one message, the learner at each thread count,
each host variant's calibration run as a :class:`RunMeasurement`) that the host tuning
(:mod:`pearl_core.composer.tuning`) reads field by field. A backend asked to measure one primitive
answers a :class:`MeasureRequest` with a :class:`PrimitiveCost`.

Unless :attr:`AssignmentMatrix.comm_inclusive` is set, cells are compute only:
Algorithm 1 adds every communication term from the hardware spec's links.
Co-located cells describe the two primitives running *together*, contention
included; Algorithm 1 uses them instead of (never in addition to) the
stand-alone cells.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from pearl_core.composer.fields import check_fields
from pearl_core.errors import SpecError

__all__ = ["AssignmentMatrix", "CELL_NAMES", "CO_CELLS", "CostCell", "DeviceCosts", "DeviceRow", "MeasureRequest",
           "PRIMITIVES", "PrimitiveCost", "RM_CELLS", "RunMeasurement", "SOURCES"]

SOURCES = ("profiled", "analytic", "given")
RM_CELLS = ("rm_sample", "rm_update", "rm_insert")
CO_CELLS = ("co_rm_sample", "co_rm_update", "co_rm_insert", "co_learner")
CELL_NAMES = RM_CELLS + ("learner",) + CO_CELLS


@dataclass(frozen=True)
class CostCell:
    """One primitive on one device, for one iteration.

    Attributes:
        latency_s: seconds per iteration (``>= 0``).
        power_w: the device's power while this runs (W, ``>= 0``).
        source: ``"profiled"`` (measured here), ``"analytic"`` (a model of a
            described device) or ``"given"`` (supplied by the user).
    """

    latency_s: float
    power_w: float = 0.0
    source: str = "analytic"

    def __post_init__(self) -> None:
        for name in ("latency_s", "power_w"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SpecError(f"CostCell.{name} = {v!r} is invalid; expected a finite number >= 0.")
            object.__setattr__(self, name, float(v))
        if self.source not in SOURCES:
            raise SpecError(f"CostCell.source = {self.source!r} is invalid; expected one of {list(SOURCES)}.")

    def to_dict(self) -> dict[str, Any]:
        return {"latency_s": self.latency_s, "power_w": self.power_w, "source": self.source}


def _seconds(owner: str, name: str, v: Any, *, optional: bool = False) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecError(f"{owner}.{name} = {v!r} is invalid; expected a finite number of seconds >= 0"
                        + (" or None." if optional else "."))
    return float(v)


def _count(owner: str, name: str, v: Any, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise SpecError(f"{owner}.{name} = {v!r} is invalid; expected an integer >= {least}.")
    return v


#: What a backend may be asked to measure (:class:`MeasureRequest`): an actor's time per experience, one
#: learner step, the replay manager's sample/update/insert, the setting-2 worker loop, one message between processes.
PRIMITIVES = ("actor_step", "learner", "replay", "worker_loop", "message_hop")


@dataclass(frozen=True)
class MeasureRequest:
    """What the composer asks a backend to measure: one primitive at the threads the composer chose.

    Attributes:
        primitive: one of :data:`PRIMITIVES`.
        threads: learner threads (``learner``, ``worker_loop``) or sum-tree threads (``replay``).
        iterations, warmup: timed and untimed calls (medians).
        budget_s: seconds the timing may take past its first calls (``None``: no bound): the probe's share of
            the profiling budget (:class:`~pearl_core.composer.timing.ProfileBudget`). A backend measures until
            ``iterations`` or ``budget_s`` is reached, whichever comes first (at least a few timed calls), and
            reports the medians of what it got. The composer also calls ``measure_primitive`` under a
            deadline derived from it (:func:`pearl_core.plugin_guard.call_deadline`), so a backend that
            ignores the field still cannot overrun the compose by much: its probe is then modelled.
    """

    primitive: str
    threads: int = 1
    iterations: int = 1000
    warmup: int = 50
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if self.primitive not in PRIMITIVES:
            raise SpecError(f"MeasureRequest.primitive = {self.primitive!r}; expected one of {list(PRIMITIVES)}.")
        _count("MeasureRequest", "threads", self.threads, 1)
        _count("MeasureRequest", "iterations", self.iterations, 1)
        _count("MeasureRequest", "warmup", self.warmup, 0)
        _seconds("MeasureRequest", "budget_s", self.budget_s, optional=True)


@dataclass(frozen=True)
class PrimitiveCost:
    """A backend's answer to a :class:`MeasureRequest`: median seconds of the primitive at the threads asked.

    ``seconds`` is the whole primitive (``replay``: sample + update + insert; ``worker_loop``: all four
    parts); the parts a primitive has are named fields (``None`` where it has no such part).

    ``worker_loop`` is the setting-2 iteration as the device runs it, each part timed while the others
    run: on the host one process does them one after another (the composer adds the update and the
    insert to the co-located learner cell); on an accelerator they overlap (e.g. the learner on one CUDA
    stream, the replay on another) and each part is its co-located cell.

    Optional: ``samples`` (timed calls the median is of, the fewest of its parts'; ``None``: not said, the
    composer counts the core's timing helpers' calls itself), ``power_w`` (watts drawn while it ran, e.g. read
    from the board; ``None``: the composer derives it from the spec), ``details`` (what the backend tuned or
    found, JSON scalars by name: it goes to the row's ``config``) and ``notes`` (one line each, to the row's
    notes).
    """

    primitive: str
    threads: int
    seconds: float
    sample_s: float | None = None
    update_s: float | None = None
    insert_s: float | None = None
    learner_s: float | None = None
    power_w: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)  # a read-only mapping: not hashable
    notes: tuple[str, ...] = ()
    samples: int | None = None

    def __post_init__(self) -> None:
        if self.primitive not in PRIMITIVES:
            raise SpecError(f"PrimitiveCost.primitive = {self.primitive!r}; expected one of {list(PRIMITIVES)}.")
        _count("PrimitiveCost", "threads", self.threads, 1)
        if self.samples is not None:
            _count("PrimitiveCost", "samples", self.samples, 1)
        object.__setattr__(self, "seconds", _seconds("PrimitiveCost", "seconds", self.seconds))
        for name in ("sample_s", "update_s", "insert_s", "learner_s"):
            object.__setattr__(self, name, _seconds("PrimitiveCost", name, getattr(self, name), optional=True))
        if self.power_w is not None:
            if isinstance(self.power_w, bool) or not isinstance(self.power_w, (int, float)) or not (
                    math.isfinite(self.power_w) and self.power_w >= 0):
                raise SpecError(f"PrimitiveCost.power_w = {self.power_w!r} is invalid; expected a finite number of "
                                "watts >= 0 or None.")
            object.__setattr__(self, "power_w", float(self.power_w))
        scalar = (str, int, float, bool, type(None))
        if not isinstance(self.details, Mapping) or not all(
                isinstance(k, str) and isinstance(v, scalar) and not (isinstance(v, float) and not math.isfinite(v))
                for k, v in self.details.items()):
            raise SpecError(f"PrimitiveCost.details = {self.details!r:.200} is invalid; expected a mapping of str "
                            "names to JSON scalars (str, int, finite float, bool, None).")
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))
        notes = (self.notes,) if isinstance(self.notes, str) else self.notes
        if not isinstance(notes, (tuple, list)) or not all(isinstance(n, str) for n in notes):
            raise SpecError(f"PrimitiveCost.notes = {self.notes!r:.200} is invalid; expected a tuple of str.")
        object.__setattr__(self, "notes", tuple(notes))


@dataclass(frozen=True)
class RunMeasurement:
    """One host variant (protocol ``setting``, learner ``threads``) as the calibration ran it, or left it out.

    Attributes:
        seconds: median seconds per update of its runs; ``None`` when it was not run.
        floor: the lower bound (its learner step alone) of a variant not run because it cannot win.
        rounds: the rounds it ran (0: not run).
        spread: its rounds' ``(max - min) / median`` (0 with one round).
    """

    setting: int
    threads: int
    seconds: float | None = None
    floor: float | None = None
    rounds: int = 0
    spread: float = 0.0

    def __post_init__(self) -> None:
        owner = f"RunMeasurement(setting {self.setting}, {self.threads} thread(s))"
        _count(owner, "setting", self.setting, 1)
        _count(owner, "threads", self.threads, 1)
        _count(owner, "rounds", self.rounds, 0)
        for name in ("seconds", "floor"):
            object.__setattr__(self, name, _seconds(owner, name, getattr(self, name), optional=True))
        object.__setattr__(self, "spread", _seconds(owner, "spread", self.spread))

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunMeasurement":
        return cls(**check_fields(cls, data))


@dataclass(frozen=True)
class DeviceCosts:
    """The host's named measurements behind its row, read by :func:`~pearl_core.composer.tuning.host_variants`.

    Attributes:
        actor_step_s: an actor's seconds per experience.
        msg_hop_s: one message between two processes.
        learner_s: ``((threads, seconds of one learner step), ...)``, ascending threads.
        threads_yield: the learner's threads yield to other processes (they may share the actors' cores).
        worker_loop_threads: the learner threads the co-located cells were measured at as the setting-2 worker
            runs them (its ``co_learner`` cell then holds the update and the insert too); ``None``: not so.
        runs: the host variants' calibration runs.
    """

    actor_step_s: float
    msg_hop_s: float
    learner_s: tuple[tuple[int, float], ...] = ()
    threads_yield: bool = False
    worker_loop_threads: int | None = None
    runs: tuple[RunMeasurement, ...] = ()

    def __post_init__(self) -> None:
        for name in ("actor_step_s", "msg_hop_s"):
            object.__setattr__(self, name, _seconds("DeviceCosts", name, getattr(self, name)))
        steps = tuple((_count("DeviceCosts", "learner_s threads", int(t) if isinstance(t, float) and t.is_integer()
                                  else t, 1), _seconds("DeviceCosts", "learner_s", v)) for t, v in self.learner_s)
        object.__setattr__(self, "learner_s", tuple(sorted(steps)))
        if not isinstance(self.threads_yield, bool):
            raise SpecError(f"DeviceCosts.threads_yield = {self.threads_yield!r}; expected True or False.")
        if self.worker_loop_threads is not None:
            _count("DeviceCosts", "worker_loop_threads", self.worker_loop_threads, 1)
        runs = tuple(RunMeasurement.from_dict(r) if isinstance(r, Mapping) else r for r in self.runs)
        if not all(isinstance(r, RunMeasurement) for r in runs):
            raise SpecError(f"DeviceCosts.runs = {self.runs!r:.200}; expected RunMeasurement records.")
        object.__setattr__(self, "runs", runs)

    def learner_at(self, threads: int) -> float | None:
        """Seconds of one learner step at ``threads``, or ``None`` when not measured."""
        return next((v for t, v in self.learner_s if t == threads), None)

    def run(self, setting: int, threads: int) -> RunMeasurement | None:
        """The calibration record of variant ``(setting, threads)``, or ``None``."""
        return next((r for r in self.runs if (r.setting, r.threads) == (int(setting), int(threads))), None)

    def to_dict(self) -> dict[str, Any]:
        return {"actor_step_s": self.actor_step_s, "msg_hop_s": self.msg_hop_s,
                "learner_s": [list(p) for p in self.learner_s], "threads_yield": self.threads_yield,
                "worker_loop_threads": self.worker_loop_threads, "runs": [r.to_dict() for r in self.runs]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceCosts":
        values = check_fields(cls, data)
        values["learner_s"] = tuple(tuple(p) for p in values.get("learner_s", ()))
        values["runs"] = tuple(values.get("runs", ()))
        return cls(**values)



@dataclass(frozen=True)
class DeviceRow:
    """One device's row of the matrix.

    Attributes:
        device: device name (as in the hardware spec).
        kind: its kind.
        rm_sample, rm_update, rm_insert: RM alone on this device: sampling ``BS``
            indices, updating ``BS`` priorities, inserting ``BS_i`` new ones.
        learner: one learner step on a batch of ``BS``, alone on this device.
        co_rm_sample, co_rm_update, co_rm_insert, co_learner: the same with RM and
            learner sharing the device.
        config: the tuning behind the cells (thread split, DP/UF, ...), JSON scalars.
        notes: why a cell is missing, and which inputs were assumed.
        costs: the named measurements behind a measured host's cells (:class:`DeviceCosts`), or ``None``.
    """

    device: str
    kind: str
    rm_sample: CostCell | None = None
    rm_update: CostCell | None = None
    rm_insert: CostCell | None = None
    learner: CostCell | None = None
    co_rm_sample: CostCell | None = None
    co_rm_update: CostCell | None = None
    co_rm_insert: CostCell | None = None
    co_learner: CostCell | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    costs: DeviceCosts | None = None

    def __post_init__(self) -> None:
        if isinstance(self.costs, Mapping):
            object.__setattr__(self, "costs", DeviceCosts.from_dict(self.costs))
        elif self.costs is not None and not isinstance(self.costs, DeviceCosts):
            raise SpecError(f"DeviceRow {self.device!r}: costs = {self.costs!r:.200}; expected DeviceCosts or None.")
        for name in CELL_NAMES:
            v = getattr(self, name)
            if isinstance(v, Mapping):
                object.__setattr__(self, name, CostCell(**v))
            elif v is not None and not isinstance(v, CostCell):
                raise SpecError(f"DeviceRow {self.device!r}: {name} = {v!r}; expected a CostCell or None.")
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))
        object.__setattr__(self, "notes", tuple(self.notes))

    @property
    def can_rm(self) -> bool:
        """All three stand-alone RM cells are present."""
        return all(getattr(self, c) is not None for c in RM_CELLS)

    @property
    def can_learn(self) -> bool:
        return self.learner is not None

    @property
    def can_colocate(self) -> bool:
        return all(getattr(self, c) is not None for c in CO_CELLS)

    def cells(self) -> Iterator[tuple[str, CostCell | None]]:
        for name in CELL_NAMES:
            yield name, getattr(self, name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device, "kind": self.kind}
        for name, cell in self.cells():
            out[name] = None if cell is None else cell.to_dict()
        out["config"] = dict(self.config)
        out["notes"] = list(self.notes)
        if self.costs is not None:  # absent otherwise: rows without measurements serialise (and hash) as before
            out["costs"] = self.costs.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceRow":
        return cls(**check_fields(cls, data))


@dataclass(frozen=True)
class AssignmentMatrix:
    """All rows, in hardware-spec order.

    Attributes:
        rows: one :class:`DeviceRow` per device.
        comm_inclusive: the cells already include communication (the paper's
            profiled cells do); Algorithm 1 then leaves the communication terms
            out of Eq. 7 and uses them only to place the Data Storage.
    """

    rows: tuple[DeviceRow, ...]
    comm_inclusive: bool = False

    def __post_init__(self) -> None:
        rows = tuple(DeviceRow.from_dict(r) if isinstance(r, Mapping) else r for r in self.rows)
        names = [r.device for r in rows]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SpecError(f"AssignmentMatrix: device(s) {dupes} have more than one row; expected one row per device.")
        object.__setattr__(self, "rows", rows)

    def row(self, device: str) -> DeviceRow:
        for r in self.rows:
            if r.device == device:
                return r
        raise SpecError(f"the matrix has no row for device {device!r}; rows: {[r.device for r in self.rows]}.")

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(r.device for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"comm_inclusive": self.comm_inclusive, "rows": [r.to_dict() for r in self.rows]}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, **kw)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AssignmentMatrix":
        data = check_fields(cls, data)
        return cls(tuple(DeviceRow.from_dict(r) for r in data.get("rows", ())), bool(data.get("comm_inclusive", False)))

    @classmethod
    def from_json(cls, text: str) -> "AssignmentMatrix":
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_table(cls, table: Mapping[str, Mapping[str, float]], *, kinds: Mapping[str, str] | None = None,
                   unit_s: float = 1.0, power_w: Mapping[str, float] | None = None,
                   comm_inclusive: bool = True) -> "AssignmentMatrix":
        """Build a matrix of ``"given"`` cells from a plain table of latencies.

        Args:
            table: ``{device: {cell name: latency}}`` with the names of
                :data:`CELL_NAMES`; a missing name leaves the cell empty.
            kinds: device kinds (default ``"cpu"`` for every device).
            unit_s: seconds per unit of the table (``1e-3`` for a table in ms).
            power_w: power per device, used for every cell of its row (default 0).
            comm_inclusive: the cells include communication (as the paper's do).
        """
        rows = []
        for dev, cells in table.items():
            unknown = sorted(set(cells) - set(CELL_NAMES))
            if unknown:
                raise SpecError(f"matrix table, device {dev!r}: unknown cell(s) {unknown}; "
                                f"expected {list(CELL_NAMES)}.")
            p = (power_w or {}).get(dev, 0.0)
            values = {name: CostCell(cells[name] * unit_s, p, "given") for name in CELL_NAMES if name in cells}
            rows.append(DeviceRow(dev, (kinds or {}).get(dev, "cpu"), **values))
        return cls(tuple(rows), comm_inclusive)
