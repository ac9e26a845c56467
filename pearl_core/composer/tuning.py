"""Beyond the paper: tune the runtime when the replay manager and the learner share the host CPU.

Algorithm 1 chooses *devices*. When it puts the RM and the learner on the host
CPU (always, on a CPU-only machine), what decides the speed is how the runtime
uses the host's cores: protocol setting 1 (the host process runs the RM and
Data Storage, a learner process trains, batches and TD errors cross the LAQ and
LDQ) or setting 2 (one worker process inserts, samples, trains and updates in
turn), and how many torch threads the learner gets. :func:`host_variants`
predicts the iteration time of each such *variant* from the host's profiled
cells and the row's named measurements (:class:`~pearl_core.composer.matrix.DeviceCosts`,
measured by :mod:`pearl_core.composer.hostprofile`: RM operations, the learner at each
thread count, an actor's time per experience, one inter-process message) and picks the
best by the plan's metric.

The model, per learner iteration (``BS`` experiences trained, ``BS_i`` new
experiences inserted; ``s, u, n`` = RM sample / update / insert cells,
``L(t)`` = learner step with ``t`` threads, ``h`` = one message, ``a`` = an
actor's time per experience, ``C`` = host threads)::

    actors        A  = BS_i * a                    (CPU time, spread over n_actors processes)
    setting 1     learner process  W_l = L(t) + 2h          (LAQ in, LDQ out)
                  host process     W_h = s + u + n + 2h      (sample into a slot, apply TD errors)
                  T1 = max(W_l, W_h, A / n_actors, (t * L(t) + 2h + W_h + A) / C)
    setting 2     worker process   W_w = s + u + n + L(t) + h   (the measured worker loop's
                                   co-located cells when the row has them for t threads)
                  T2 = max(W_w, A / n_actors, (W_w + (t - 1) * L(t) + h + A) / C)

**Calibration runs.** The isolated cells leave out what the runtime adds per
update: the messages and the wake-ups between processes, the host relaying
rows and batches, the actors' rows, weight publication, and three or more
processes sharing a small machine's cores. On a 2-core VM that is most of an
update at small models (the model above predicted 0.19 ms where setting 1
measured 0.79 ms for DQN 64-64 at batch 32). So when the row has a
calibration run of a variant (a :class:`~pearl_core.composer.matrix.RunMeasurement` in
``row.costs.runs``: the composer runs each variant as the runtime does for a few seconds,
:func:`~pearl_core.composer.profiling.profile_runtime`), its measured seconds
per update are the prediction (``bound = "run"``) and the model's figure is
kept as :attr:`Variant.model_s`. ``pearl validate --sweep`` reports both. A
variant the calibration left out because it cannot win
(:mod:`pearl_core.composer.calibrate`: its learner step alone, the record's
``floor``, is slower than the best run by more than
a tie) is predicted at that floor or the model's figure, the larger
(``bound = "floor"``): a lower bound, not a measurement, and never the choice.

The first terms of each ``max`` are the processes' own critical paths (setting
1 pipelines: sampling ``t + 1`` overlaps training ``t``); the last is the whole
machine's CPU demand spread over its ``C`` hardware threads, which is what
binds on a small machine. Power per variant interpolates the device's idle and
active power by the threads kept busy. Scores within 3% of the best are ties
(:data:`TIE`), or within the calibration rounds' spread (at most 10%), broken
by the lower traffic (setting 2 moves no batch between processes), then by
the higher score. Learner
threads range over ``1 .. C - n_actors`` (the actors keep their cores, the
paper's rule; oversubscribing cores stalls torch's OpenMP threads, see
:func:`host_variants`), or ``1 .. C`` where the learner's threads yield to the
actors (``DeviceCosts.threads_yield``: the native DQN step's help-first helper).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pearl_core.composer.matrix import DeviceRow
from pearl_core.composer.spec import DeviceSpec
from pearl_core.composer.workload import Workload
from pearl_core.runtime.config import Setting

__all__ = ["NOISE_CAP", "TIE", "Variant", "host_variants", "pick_variant", "rounds_spread"]


@dataclass(frozen=True)
class Variant:
    """One way to run RM + learner on the host CPU, with its prediction.

    Attributes:
        setting: the protocol :class:`~pearl_core.runtime.config.Setting` (an int given here is converted).
        learner_threads, rm_threads: torch intra-op threads / sum-tree threads.
        predicted_s: predicted seconds per learner iteration.
        throughput: ``BS / predicted_s`` (experiences trained per second).
        power_w: predicted host power.
        traffic_bytes: bytes moved between processes per iteration.
        bound: which term of the model binds (``"learner"``, ``"host"``, ``"worker"``,
            ``"actors"``, ``"cpu"``), ``"run"`` when ``predicted_s`` is a calibration run's, or
            ``"floor"`` when it is the lower bound of a variant not run (it cannot win), ``"scaled"`` when the
            calibration left it out because of the profiling budget (the model's figure times the median
            ratio of measured to modelled seconds over the variants it ran, at least 1).
        model_s: what the isolated cells' model above predicts (``predicted_s`` unless a
            calibration run replaced it).
        spread: the calibration rounds' ``(max - min) / median`` (their noise); 0 when the
            prediction is not a calibration run's.
    """

    setting: Setting
    learner_threads: int
    rm_threads: int
    predicted_s: float
    throughput: float
    power_w: float
    traffic_bytes: int
    bound: str
    model_s: float = math.nan
    spread: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "setting", Setting(self.setting))

    def score(self, metric: str) -> float:
        return self.throughput if metric == "throughput" else self.throughput / max(self.power_w, 1e-12)

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "learner_threads": self.learner_threads, "rm_threads": self.rm_threads,
                "predicted_s": self.predicted_s, "throughput": self.throughput, "power_w": self.power_w,
                "traffic_bytes": self.traffic_bytes, "bound": self.bound,
                "model_s": self.model_s if math.isfinite(self.model_s) else None, "spread": self.spread}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Variant":
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if values.get("model_s") is None:
            values.pop("model_s", None)
        return cls(**values)


def rounds_spread(times: Sequence[float]) -> float:
    """``(max - min) / median`` of one candidate's rounds (seconds per update): their noise. 0 for a single
    round; ``nan`` for none or a median that is not positive. :attr:`RunMeasurement.spread
    <pearl_core.composer.matrix.RunMeasurement.spread>` and
    :attr:`~pearl_core.composer.validate.ValidationRow.spread` are this."""
    if not times:
        return math.nan
    m = statistics.median(times)
    return (max(times) - min(times)) / m if m > 0 else math.nan


def host_variants(device: DeviceSpec, row: DeviceRow, wl: Workload) -> tuple[Variant, ...]:
    """Every (setting, learner threads) variant the host's measured row can predict; empty without one
    (a row without :class:`~pearl_core.composer.matrix.DeviceCosts`, or without the RM cells)."""
    costs = row.costs
    if costs is None or not row.can_rm:
        return ()
    a, h = costs.actor_step_s, costs.msg_hop_s
    threads = int(device.threads or device.cores or 1)
    s, u, n = (getattr(row, c).latency_s for c in ("rm_sample", "rm_update", "rm_insert"))
    co = row.can_colocate and costs.worker_loop_threads is not None
    if co:  # the worker loop as measured: sample, learner + update + insert (see composer.hostprofile)
        cs = row.co_rm_sample.latency_s  # type: ignore[union-attr]
        c_rest = row.co_learner.latency_s  # type: ignore[union-attr]
    bs, bsi, na = wl.batch_size, int(wl.insert_batch or wl.n_actors), wl.n_actors
    A = bsi * float(a)
    batch_bytes = bs * (wl.experience_bytes + wl.weight_bytes + wl.priority_bytes)
    out: list[Variant] = []
    # The paper's rule: actors keep their cores; the learner takes at most what they leave. More
    # threads than that is not a variant worth running: torch's OpenMP threads wait for each other
    # at every parallel region, so one that shares a core with a busy actor stalls the whole step,
    # even where the step profiled alone is faster with more threads.
    # A learner whose threads yield to the actors (help-first, ``threads_yield``) is the exception:
    # its variants that share the actors' cores are predicted too (their calibration runs decide).
    most = threads if costs.threads_yield else max(1, threads - na)
    models: list[tuple[Setting, int, float, str, int, int, int]] = []
    for t, L in costs.learner_s:  # ascending; a spec's thread count bounds them only through what was measured
        if t > most:
            continue
        rm_t = max(1, min(threads - na - t, bs))
        W_l, W_h = L + 2 * h, s + u + n + 2 * h
        terms1 = {"learner": W_l, "host": W_h, "actors": A / na, "cpu": (t * L + 2 * h + W_h + A) / threads}
        W_w = (cs + c_rest + h) if (co and t == costs.worker_loop_threads) else s + u + n + L + h
        terms2 = {"worker": W_w, "actors": A / na, "cpu": (W_w + (t - 1) * L + h + A) / threads}
        for setting, terms, busy, traffic in ((Setting.THROUGH_HOST, terms1, t + 1 + na, batch_bytes),
                                              (Setting.COLOCATED, terms2, t + na, 0)):
            bound = max(terms, key=terms.__getitem__)
            models.append((setting, t, terms[bound], bound, busy, traffic, rm_t))
    scale = _run_scale(costs, models)
    for setting, t, model, bound, busy, traffic, rm_t in models:
        T, spread = model, 0.0
        rec = costs.run(setting, t)
        if rec is not None and rec.seconds is not None and rec.seconds > 0:
            T, bound = rec.seconds, "run"  # the variant as the runtime ran it (see the module docstring)
            spread = rec.spread
        elif rec is not None and rec.floor is not None and rec.floor > 0:
            T, bound = max(rec.floor, model), "floor"  # not run: a lower bound above the best run
        elif scale is not None:  # not run (the profiling budget): the model, scaled as the runs measured it
            T, bound = model * scale, "scaled"
        power = device.idle_power_w + (device.active_power_w - device.idle_power_w) * min(1.0, busy / threads)
        rm_threads = rm_t if setting == Setting.THROUGH_HOST else t
        out.append(Variant(setting, t, rm_threads, T, bs / T, power, traffic, bound, model, spread))
    return tuple(out)


def _run_scale(costs: Any, models: list[tuple[Setting, int, float, str, int, int, int]]) -> float | None:
    """Median of measured / modelled seconds over the variants the calibration ran (``None``: none ran, or
    every variant has a record): what scales the variants it left out because of the profiling budget."""
    ratios = []
    for setting, t, model, *_ in models:
        rec = costs.run(setting, t)
        if rec is not None and rec.seconds is not None and rec.seconds > 0 and model > 0:
            ratios.append(rec.seconds / model)
    if not ratios or all(costs.run(setting, t) is not None for setting, t, *_ in models):
        return None
    return max(1.0, statistics.median(ratios))


#: Variants whose scores are within this fraction of the best one's are tied: calibration runs of one
#: variant vary by about that much, so a smaller lead is not a measured difference.
TIE = 0.03
#: A lead smaller than the calibration rounds' own spread is not measured either, up to this much.
NOISE_CAP = 0.10


def pick_variant(variants: tuple[Variant, ...], metric: str) -> int:
    """Index of the best variant by ``metric``.

    A variant is tied with the best when it scores within :data:`TIE` (3%) of it, or
    within the larger calibration spread of the two (:attr:`Variant.spread`, at most
    :data:`NOISE_CAP`): a lead the rounds' own noise covers is not a measured one. The
    tie goes to the lower traffic (setting 2 moves no batch between processes: the
    paper's rule for equal throughput), then to the higher score: within a tie the measured lead is
    still the best guess there is (not fewer threads: see ``benchmarks/README.md``, "Composer fidelity").
    """
    top = max(variants, key=lambda v: v.score(metric))
    best = top.score(metric)
    tied = [i for i, v in enumerate(variants)  # a variant not run (bound "floor") ties with nothing: it lost
            if v.score(metric) >= best * (1 - max(TIE, min(NOISE_CAP, max(top.spread, v.spread))))
            and (v.bound != "floor" or v is top)]
    return min(tied, key=lambda i: (variants[i].traffic_bytes, -variants[i].score(metric)))
