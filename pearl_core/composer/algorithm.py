r"""Algorithm 1 of PEARL: choose the devices of the Replay Manager, the learner and the Data Storage.

Notation (all SI: seconds, bytes, bytes/s, W)::

    BS    training batch size              BS_i  experiences inserted per iteration
    E     bytes of one experience          I, P, W  bytes of one index, priority, importance weight
    h     the host CPU (runtime loop, actors)
    c(a->b, n) = lat(a,b) + n / bw(a,b)    one message of n bytes over the spec's route a->b
                                           (a == b: within the device; two hops via h when
                                           a and b are different accelerators)
    s_i, u_i, n_i : RM sample / update / insert cells of device i;  L_j : learner cell of device j
    co: the co-located cells of a device (RM and learner sharing it)

**Step 1** (lines 2-9 of the paper's Algorithm 1, O(M^2)). For every RM device
``i`` and learner device ``j`` (Eq. 7)::

    T_itr(i, j) = [s_i + C_s] + max( [u_i + n_i + C_u],  [L_j + C_L] )          i != j  (setting 1)
    T_itr(i, i) = [co_s_i + C_s] + max( [co_u_i + co_n_i + C_u], [co_L_i + C_L] ) i == j  (setting 2)

The co-located cells replace the stand-alone ones: they are counted once (the
authors' populator added the learner twice). Communication terms, one message
per row, each costed with ``c`` (setting 1 routes everything through the host)::

    setting 1 (i != j)                          setting 2 (i == j = d)
    C_s = c(h->i, 0)            request         C_s = c(d->d, BS(I+P))          indices to learner
        + c(i->h, BS(I+P))      indices
    C_u = c(h->i, BS(I+P))      new priorities  C_u = c(d->d, BS(I+P))          new priorities
        + c(h->i, BS_i(I+P))    insertions          + c(h->d, BS_i(E+I+P))      insertions (DS on d)
    C_L = c(h->j, BS(E+W))      batch (DS on h) C_L = c(d->d, BS(E+W))          batch from DS on d
        + c(j->h, BS·P)         TD errors           + c(d->d, BS·P)             TD errors

Uniform replay has no priorities: ``P`` and ``W`` are 0 and no update message is
sent. In *given-matrix* mode (:attr:`AssignmentMatrix.comm_inclusive`, the
paper's profiled cells) the ``C`` terms are left out of ``T_itr`` (the cells
already include them) but are still reported and used below.

Score (higher is better)::

    throughput(i, j)       = BS / T_itr(i, j)                       samples/s
    power_efficiency(i, j) = throughput(i, j) / Power(i, j)         samples/J
    Power(i, j) = sum over d in {h, i, j} of
                  min(active_d, idle_d + actors_d + sum_{cells on d} (p_cell - idle_d)^+ * t_cell / T_itr)
    actors_h = (active_h - idle_h) * min(1, n_actors / threads_h), 0 on other devices

i.e. each device used draws its idle power plus the energy its cells add over
an iteration (the actors keep a share of the host busy), capped at its active
power. Candidates whose scores are equal within a relative tolerance of 1e-9
are ordered by the bytes their messages move *across devices* (a two-hop route
counts twice), then by total communication time, then by spec order.

**Step 2** (lines 10-19, O(M)). With ``(i*, j*)`` chosen, place the Data
Storage on the device ``d`` that can hold ``capacity * E`` bytes and minimises
the per-iteration traffic cost::

    C_DS(d) = c(i*->d, BS·I)          sampled indices, from the sampler
            + c(d->j*, BS·E)          sampled experiences, to the learner
            + c(h->d,  BS_i·E)        the actors' insertions

in bytes and seconds throughout (the authors charged the index flow in raw
words, which dragged the storage to the RM's device). Ties as in step 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pearl_core.composer.matrix import AssignmentMatrix, CostCell
from pearl_core.composer.spec import HardwareSpec
from pearl_core.composer.workload import Workload
from pearl_core.errors import SpecError
from pearl_core.runtime.config import Setting

__all__ = ["Candidate", "Decision", "DSOption", "METRICS", "Message", "REL_TOL", "algorithm1",
           "evaluate_candidate", "iteration_messages", "place_storage"]

METRICS = ("throughput", "power_efficiency")
#: Relative tolerance under which two scores (or two DS costs) count as tied.
REL_TOL = 1e-9


@dataclass(frozen=True)
class Message:
    """One message of an iteration: ``cost_s = lat + nbytes / bw`` over the route src -> dst.

    ``crossings`` is the number of device boundaries it crosses (0 within a
    device, 1 direct, 2 via the host); ``nbytes * crossings`` is its traffic.
    """

    name: str
    src: str
    dst: str
    nbytes: int
    cost_s: float
    crossings: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "src": self.src, "dst": self.dst, "nbytes": self.nbytes,
                "cost_s": self.cost_s, "crossings": self.crossings}


@dataclass(frozen=True)
class Candidate:
    """One (RM device, learner device) pair, with every number of Eq. 7.

    Attributes:
        rm_device, learner_device: device names.
        setting: :attr:`Setting.THROUGH_HOST` (1), or :attr:`Setting.COLOCATED` (2) when
            ``rm_device == learner_device`` (an int given here is converted).
        feasible: both primitives can run there; otherwise ``reason`` says why and
            the numbers are ``None``.
        sample_s, update_insert_s, learner_s: the cells of the three terms.
        sample_comm_s, update_insert_comm_s, learner_comm_s: their communication terms.
        comm_counted: whether the communication terms are inside ``iteration_s``.
        iteration_s: ``T_itr``.
        throughput: ``BS / T_itr`` (samples/s).
        power_w: ``Power(i, j)``.
        score: throughput or throughput per watt, by the metric.
        traffic_bytes: bytes moved across device boundaries per iteration.
        moved_bytes: bytes of every message (within devices too).
        messages: the messages behind the communication terms, by term.
    """

    rm_device: str
    learner_device: str
    setting: Setting
    feasible: bool
    reason: str = ""
    sample_s: float | None = None
    update_insert_s: float | None = None
    learner_s: float | None = None
    sample_comm_s: float | None = None
    update_insert_comm_s: float | None = None
    learner_comm_s: float | None = None
    comm_counted: bool = True
    iteration_s: float | None = None
    throughput: float | None = None
    power_w: float | None = None
    score: float | None = None
    traffic_bytes: int = 0
    moved_bytes: int = 0
    messages: Mapping[str, tuple[Message, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "setting", Setting(self.setting))

    @property
    def comm_s(self) -> float:
        """Total communication time of the iteration's messages."""
        return sum(m.cost_s for msgs in self.messages.values() for m in msgs)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in (
            "rm_device", "learner_device", "setting", "feasible", "reason", "sample_s", "update_insert_s",
            "learner_s", "sample_comm_s", "update_insert_comm_s", "learner_comm_s", "comm_counted",
            "iteration_s", "throughput", "power_w", "score", "traffic_bytes", "moved_bytes")}
        out["messages"] = {term: [m.to_dict() for m in msgs] for term, msgs in self.messages.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Candidate":
        data = dict(data)
        data["messages"] = {t: tuple(Message(**m) for m in msgs) for t, msgs in data.get("messages", {}).items()}
        return cls(**data)


@dataclass(frozen=True)
class DSOption:
    """Data Storage on one device: the step-2 cost ``C_DS(d)`` and its flows."""

    device: str
    feasible: bool
    reason: str = ""
    cost_s: float | None = None
    traffic_bytes: int = 0
    flows: tuple[Message, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "feasible": self.feasible, "reason": self.reason, "cost_s": self.cost_s,
                "traffic_bytes": self.traffic_bytes, "flows": [m.to_dict() for m in self.flows]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DSOption":
        data = dict(data)
        data["flows"] = tuple(Message(**m) for m in data.get("flows", ()))
        return cls(**data)


@dataclass(frozen=True)
class Decision:
    """What Algorithm 1 decided, and every number it compared.

    Attributes:
        metric: ``"throughput"`` or ``"power_efficiency"``.
        comm_inclusive: cells were taken as communication-inclusive (given-matrix mode).
        candidates: every (RM, learner) pair in spec order (RM-major).
        ds_options: every Data Storage placement for the chosen pair, in spec order.
        rm_device, learner_device, ds_device: the choice.
        setting: the chosen pair's :class:`Setting` (an int given here is converted).
        tied_with: other candidates whose score tied the winner's, as ``(rm, learner)``.
        tie_break: ``""`` (no tie), ``"traffic"``, ``"communication time"`` or ``"spec order"``.
        constraint: ``""``, or what restricted the choice (placements the user
            forced, or only placements that can run here); the candidates keep
            every number either way.
    """

    metric: str
    comm_inclusive: bool
    candidates: tuple[Candidate, ...]
    ds_options: tuple[DSOption, ...]
    rm_device: str
    learner_device: str
    ds_device: str
    setting: Setting
    tied_with: tuple[tuple[str, str], ...] = ()
    tie_break: str = ""
    constraint: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "setting", Setting(self.setting))

    @property
    def chosen(self) -> Candidate:
        return self.candidate(self.rm_device, self.learner_device)

    def candidate(self, rm: str, learner: str) -> Candidate:
        for c in self.candidates:
            if (c.rm_device, c.learner_device) == (rm, learner):
                return c
        raise SpecError(f"no candidate (RM {rm!r}, learner {learner!r}); devices: "
                        f"{sorted({c.rm_device for c in self.candidates})}.")

    def ds_option(self, device: str) -> DSOption:
        for o in self.ds_options:
            if o.device == device:
                return o
        raise SpecError(f"no Data Storage option for device {device!r}.")

    def ranking(self) -> list[Candidate]:
        """Feasible candidates, best first (same order as the choice rule)."""
        feasible = [c for c in self.candidates if c.feasible]
        return sorted(feasible, key=lambda c: (-c.score, c.traffic_bytes, c.comm_s))  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "comm_inclusive": self.comm_inclusive,
                "candidates": [c.to_dict() for c in self.candidates],
                "ds_options": [o.to_dict() for o in self.ds_options],
                "rm_device": self.rm_device, "learner_device": self.learner_device, "ds_device": self.ds_device,
                "setting": self.setting, "tied_with": [list(t) for t in self.tied_with], "tie_break": self.tie_break,
                **({"constraint": self.constraint} if self.constraint else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Decision":
        data = dict(data)
        data["candidates"] = tuple(Candidate.from_dict(c) for c in data["candidates"])
        data["ds_options"] = tuple(DSOption.from_dict(o) for o in data["ds_options"])
        data["tied_with"] = tuple(tuple(t) for t in data.get("tied_with", ()))
        return cls(**data)


# --------------------------------------------------------------------------- messages
def _msg(spec: HardwareSpec, name: str, src: str, dst: str, nbytes: int) -> Message:
    route = spec.link(src, dst)
    return Message(name, src, dst, int(nbytes), route.cost_s(nbytes), route.crossings)


def iteration_messages(spec: HardwareSpec, wl: Workload, rm: str, learner: str) -> dict[str, tuple[Message, ...]]:
    """The messages of one iteration, grouped by Eq. 7 term (``sample``, ``update_insert``, ``learner``).

    See the module docstring for the table; ``rm == learner`` is setting 2.
    """
    h = str(spec.host)  # always set once a HardwareSpec is validated
    bs, bsi, e, i = wl.batch_size, int(wl.insert_batch or wl.n_actors), wl.experience_bytes, wl.index_bytes
    prioritized = wl.replay == "prioritized"
    p = wl.priority_bytes if prioritized else 0
    w = wl.weight_bytes if prioritized else 0
    if rm != learner:
        sample = (_msg(spec, "sample request", h, rm, 0), _msg(spec, "sampled indices", rm, h, bs * (i + p)))
        upd = (_msg(spec, "priority update", h, rm, bs * (i + p)),) if prioritized else ()
        upd += (_msg(spec, "insert request", h, rm, bsi * (i + p)),)
        learn = (_msg(spec, "training batch", h, learner, bs * (e + w)), _msg(spec, "TD errors", learner, h, bs * p))
    else:
        d = rm
        sample = (_msg(spec, "sampled indices", d, d, bs * (i + p)),)
        upd = (_msg(spec, "priority update", d, d, bs * (i + p)),) if prioritized else ()
        upd += (_msg(spec, "insertions", h, d, bsi * (e + i + p)),)
        learn = (_msg(spec, "training batch", d, d, bs * (e + w)), _msg(spec, "TD errors", d, d, bs * p))
    return {"sample": sample, "update_insert": upd, "learner": learn}


# --------------------------------------------------------------------------- step 1
def _cells(matrix: AssignmentMatrix, rm: str, learner: str) -> tuple[list[tuple[str, CostCell]], str]:
    """The cells of a pair as ``[(device, cell)]`` in term order (s, u, n, L), or a reason they are missing."""
    if rm == learner:
        row = matrix.row(rm)
        if not row.can_colocate:
            why = "; ".join(row.notes) or "no co-located cells"
            return [], f"RM and learner cannot share {rm!r}: {why}"
        return [(rm, row.co_rm_sample), (rm, row.co_rm_update), (rm, row.co_rm_insert),  # type: ignore[list-item]
                (rm, row.co_learner)], ""
    rrow, lrow = matrix.row(rm), matrix.row(learner)
    if not rrow.can_rm:
        return [], f"no RM cells for {rm!r}: {'; '.join(rrow.notes) or 'missing'}"
    if not lrow.can_learn:
        return [], f"no learner cell for {learner!r}: {'; '.join(lrow.notes) or 'missing'}"
    return [(rm, rrow.rm_sample), (rm, rrow.rm_update), (rm, rrow.rm_insert),  # type: ignore[list-item]
            (learner, lrow.learner)], ""


def _power(spec: HardwareSpec, wl: Workload, rm: str, learner: str, cells: list[tuple[str, CostCell]],
           t_itr: float) -> float:
    """``Power(i, j)`` of the module docstring."""
    total = 0.0
    for name in dict.fromkeys((spec.host, rm, learner)):
        dev = spec.device(name)  # type: ignore[arg-type]
        idle, active = dev.idle_power_w, dev.active_power_w
        p = idle
        if name == spec.host:
            p += (active - idle) * min(1.0, wl.n_actors / (dev.threads or dev.cores or 1))
        p += sum(max(0.0, c.power_w - idle) * c.latency_s for d, c in cells if d == name) / t_itr
        total += min(active, p)
    return total


def evaluate_candidate(spec: HardwareSpec, matrix: AssignmentMatrix, wl: Workload, rm: str, learner: str,
                       metric: str = "throughput", comm_inclusive: bool | None = None) -> Candidate:
    """Eq. 7 and the score for one (RM device, learner device) pair."""
    if metric not in METRICS:
        raise SpecError(f"metric = {metric!r} is invalid; expected one of {list(METRICS)}.")
    comm_in = matrix.comm_inclusive if comm_inclusive is None else comm_inclusive
    setting = Setting.COLOCATED if rm == learner else Setting.THROUGH_HOST
    messages = iteration_messages(spec, wl, rm, learner)
    all_msgs = [m for msgs in messages.values() for m in msgs]
    traffic = sum(m.nbytes * m.crossings for m in all_msgs)
    moved = sum(m.nbytes for m in all_msgs)
    cells, reason = _cells(matrix, rm, learner)
    base = dict(rm_device=rm, learner_device=learner, setting=setting, traffic_bytes=traffic, moved_bytes=moved,
                messages=messages, comm_counted=not comm_in)
    if reason:
        return Candidate(feasible=False, reason=reason, **base)
    (_, s), (_, u), (_, n), (_, lc) = cells
    c_s, c_u, c_l = (sum(m.cost_s for m in messages[t]) for t in ("sample", "update_insert", "learner"))
    k = 0.0 if comm_in else 1.0
    t_itr = (s.latency_s + k * c_s) + max(u.latency_s + n.latency_s + k * c_u, lc.latency_s + k * c_l)
    if not t_itr > 0:
        return Candidate(feasible=False, reason="the iteration time is 0; the cells must not all be 0", **base)
    throughput = wl.batch_size / t_itr
    power = _power(spec, wl, rm, learner, cells, t_itr)
    if metric == "power_efficiency" and power <= 0:
        return Candidate(feasible=False, reason="power is 0 W; give idle/active power in the spec", **base)
    score = throughput if metric == "throughput" else throughput / power
    return Candidate(feasible=True, sample_s=s.latency_s, update_insert_s=u.latency_s + n.latency_s,
                     learner_s=lc.latency_s, sample_comm_s=c_s, update_insert_comm_s=c_u, learner_comm_s=c_l,
                     iteration_s=t_itr, throughput=throughput, power_w=power, score=score, **base)


# --------------------------------------------------------------------------- step 2
def place_storage(spec: HardwareSpec, wl: Workload, rm: str, learner: str,
                  unfit: Callable[[str], str | None] | None = None) -> tuple[DSOption, ...]:
    """``C_DS(d)`` for every device ``d`` (step 2), in spec order.

    ``unfit(device)``: why ``device`` cannot hold a Data Storage at all (e.g. its
    backend offers none), or ``None``; such a device's option is infeasible.
    """
    h = str(spec.host)
    need = wl.capacity * wl.experience_bytes
    out = []
    for dev in spec.devices:
        d = dev.name
        flows = (_msg(spec, "sampled indices", rm, d, wl.batch_size * wl.index_bytes),
                 _msg(spec, "sampled experiences", d, learner, wl.batch_size * wl.experience_bytes),
                 _msg(spec, "insertions", h, d, int(wl.insert_batch or wl.n_actors) * wl.experience_bytes))
        traffic = sum(m.nbytes * m.crossings for m in flows)
        why = unfit(d) if unfit is not None else None
        if why:
            out.append(DSOption(d, False, why, None, traffic, flows))
            continue
        if need > dev.memory_bytes:
            out.append(DSOption(d, False, f"the storage needs {need / 2**30:.2f} GiB "
                                          f"({wl.capacity} x {wl.experience_bytes} B); {d!r} has "
                                          f"{dev.memory_bytes / 2**30:.2f} GiB", None, traffic, flows))
            continue
        out.append(DSOption(d, True, "", sum(m.cost_s for m in flows), traffic, flows))
    return tuple(out)


def _pick(items: list[Any], value, minimise: bool) -> tuple[Any, list[Any], str]:
    """Best item by ``value`` with the tie rule: relative tolerance, then traffic, comm time, order."""
    best = (min if minimise else max)(value(x) for x in items)
    tied = [x for x in items if math.isclose(value(x), best, rel_tol=REL_TOL, abs_tol=0.0)]
    if len(tied) == 1:
        return tied[0], [], ""

    def comm(x: Any) -> float:
        return x.comm_s if isinstance(x, Candidate) else x.cost_s

    keyed = sorted(enumerate(tied), key=lambda ix: (ix[1].traffic_bytes, comm(ix[1]), ix[0]))
    winner = keyed[0][1]
    runner = keyed[1][1]
    if winner.traffic_bytes != runner.traffic_bytes:
        rule = "traffic"
    elif comm(winner) != comm(runner):
        rule = "communication time"
    else:
        rule = "spec order"
    return winner, [x for x in tied if x is not winner], rule


def algorithm1(spec: HardwareSpec, matrix: AssignmentMatrix, workload: Workload, metric: str = "throughput",
               *, comm_inclusive: bool | None = None, choose: Callable[[str, str], bool] | None = None,
               constraint: str = "", storage_unfit: Callable[[str], str | None] | None = None) -> Decision:
    """Run Algorithm 1 (both steps) and return the :class:`Decision` with every candidate.

    Args:
        spec: devices and links (routes and communication costs come from it).
        matrix: one row per spec device (extra rows are ignored).
        workload: batch sizes, byte sizes, replay configuration.
        metric: ``"throughput"`` or ``"power_efficiency"``.
        comm_inclusive: override :attr:`AssignmentMatrix.comm_inclusive`.
        choose: ``choose(primitive, device) -> bool`` restricts the choice to
            devices it allows for ``"rm"``, ``"learner"`` and ``"storage"`` (every
            candidate is still evaluated and kept); ``constraint`` says why, in the
            decision and in errors.
        storage_unfit: ``storage_unfit(device)`` says why a device cannot hold a
            Data Storage at all (see :func:`place_storage`).

    Raises:
        SpecError: unknown metric, a spec device without a matrix row, or no
            feasible (RM, learner) pair / Data Storage device.
    """
    if metric not in METRICS:
        raise SpecError(f"metric = {metric!r} is invalid; expected one of {list(METRICS)}.")
    names = [d.name for d in spec.devices]
    for n in names:
        matrix.row(n)
    comm_in = matrix.comm_inclusive if comm_inclusive is None else comm_inclusive
    candidates = tuple(evaluate_candidate(spec, matrix, workload, i, j, metric, comm_in) for i in names for j in names)
    feasible = [c for c in candidates if c.feasible]
    if not feasible:
        reasons = "; ".join(f"({c.rm_device}, {c.learner_device}): {c.reason}" for c in candidates)
        raise SpecError(f"no (RM, learner) assignment is feasible: {reasons}.")
    allowed = feasible if choose is None else [c for c in feasible if choose("rm", c.rm_device)
                                               and choose("learner", c.learner_device)]
    if not allowed:
        raise SpecError(f"no feasible (RM, learner) assignment is left once restricted to {constraint or 'choose'}; "
                        "feasible ones: " + ", ".join(f"({c.rm_device}, {c.learner_device})" for c in feasible) + ".")
    best, tied, rule = _pick(allowed, lambda c: c.score, minimise=False)
    ds = place_storage(spec, workload, best.rm_device, best.learner_device, storage_unfit)
    ds_ok = [o for o in ds if o.feasible and (choose is None or choose("storage", o.device))]
    if not ds_ok:
        raise SpecError("no device can hold the Data Storage: " + "; ".join(
            o.reason or f"{o.device!r} is left out by {constraint or 'choose'}" for o in ds) +
            ". Fix: lower the replay capacity" + (f", or relax {constraint}" if constraint else "") + ".")
    ds_best, _, _ = _pick(ds_ok, lambda o: o.cost_s, minimise=True)
    return Decision(metric, comm_in, candidates, ds, best.rm_device, best.learner_device, ds_best.device,
                    best.setting, tuple((c.rm_device, c.learner_device) for c in tied), rule, constraint)
