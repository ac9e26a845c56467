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

__all__ = ["AssignmentMatrix", "CELL_NAMES", "CO_CELLS", "CostCell", "DeviceRow", "RM_CELLS", "SOURCES"]

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

    def __post_init__(self) -> None:
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
                raise SpecError(f"matrix table, device {dev!r}: unknown cell(s) {unknown}; expected {list(CELL_NAMES)}.")
            p = (power_w or {}).get(dev, 0.0)
            values = {name: CostCell(cells[name] * unit_s, p, "given") for name in CELL_NAMES if name in cells}
            rows.append(DeviceRow(dev, (kinds or {}).get(dev, "cpu"), **values))
        return cls(tuple(rows), comm_inclusive)
