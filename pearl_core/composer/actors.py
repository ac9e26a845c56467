"""How many actor processes a run gets when the user leaves it to the composer.

``Composer.set_actors(env_id, n_actors=None)`` (or ``"auto"``; ``pearl compose --actors auto``) asks the
composer for ``N``; an integer is kept as given. The rule, per learner iteration of the plan::

    demand  D = 1 / (T_itr * rr)     env steps/s the learner consumes
    supply  r = 1 / a(E)             env steps/s one actor delivers at E envs per actor
    need      = ceil(D / r)          the fewest actors whose collection covers the learner
    cap       = C - 1 - L            the host's cores less the host loop's and the learner side's
    N         = max(1, min(need, cap))

``T_itr`` is Algorithm 1's iteration of the chosen candidate (``decision.chosen.iteration_s``: sample,
update, insert and the learner's step with the data ready, so it does not depend on how many actors
feed it; a calibration run of the host variants does, having run with a given number of actors).
``rr`` is the replay ratio: the parallel runtime's continuous
:class:`~pearl_core.runtime.step.UpdateSchedule` owes ``floor((T - learning_starts) * rr)`` updates after
``T`` env steps, so each update consumes ``1 / rr`` env steps whatever ``train_every`` says (bursts are the
serial runtime's, which has no actor processes). ``a(E)`` is an actor's time per experience at the
chosen envs per actor, as :mod:`pearl_core.composer.knobs` measured it (its ``measured_s``), else the
host row's ``actor_step_s`` (:mod:`pearl_core.composer.hostprofile` measured it at the workload's envs):
nothing is measured twice. ``C`` is the host's cores (this machine's, when it is the host), ``L`` the
learner side's threads on them: the runtime plan's learner threads when the learner runs on the host
CPU, else the one core of the process that drives its device; the host loop keeps one core (in setting 1
it is the replay manager's process, whose threads take what is left).

The thread split and the cost models depend on ``N`` (actors keep their cores: the learner's threads
range over ``1 .. C - N``), so :func:`settle_actors` plans at one actor, applies the rule, plans again
at ``N`` over the same measured rows (:class:`RowMemo`: nothing is measured again) and repeats until
``N`` no longer changes (:data:`MAX_PASSES` plans at most). Only the planning is repeated.

A what-if plan (no profiling, or a host described but not this machine) has no measured actor: the
analytic rule gives every core the host loop and the learner leave an actor (``N = cap``), and the
record says so. The choice is kept like the envs choice: a
:class:`~pearl_core.composer.knobs.KnobChoice` in the placement plan's ``tuning["knobs"]["n_actors"]``
(value, who chose it, the actor time used, the learner iteration, the reason with the numbers), which
``pearl compose`` prints.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from pearl_core.composer.knobs import KnobChoice
from pearl_core.errors import ComposerError

if TYPE_CHECKING:
    from pearl_core.composer.matrix import DeviceRow
    from pearl_core.composer.plan import PlacementPlan
    from pearl_core.composer.spec import DeviceSpec, HardwareSpec
    from pearl_core.composer.workload import Workload
    from pearl_core.runtime.config import RuntimePlan

__all__ = ["AUTO", "MAX_PASSES", "RowMemo", "choose_n_actors", "learner_side_threads", "parse_actors",
           "settle_actors"]

#: What ``--actors`` and ``set_actors(n_actors=...)`` accept for "the composer chooses".
AUTO = "auto"
#: Plans made at most while ``N`` settles (the first at one actor).
MAX_PASSES = 3

T = TypeVar("T")


def parse_actors(value: Any, where: str) -> Any:
    """``None`` for auto (``None`` or ``"auto"``, any case), the int a string of digits names (``"4"`` from a
    command line), else ``value`` unchanged (the caller checks it as the runtime plan's ``n_actors`` field).

    Raises:
        ComposerError: another string, naming ``where``.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return None
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise ComposerError(f"{where}: n_actors = {value!r}; expected an int >= 1 (actor processes) or "
                                f"{AUTO!r} (the composer chooses from the measured actor rate and the learner's "
                                f"iteration). Fix: e.g. --actors 4, or --actors {AUTO}.")
        return int(value.strip())
    return value


def learner_side_threads(rp: "RuntimePlan") -> int:
    """Cores the learner side of ``rp`` keeps on the host: its torch threads when the learner runs on the CPU
    (in setting 2 the replay manager shares that process and its threads), else 1 (the process that drives
    the learner's device)."""
    return max(1, int(rp.learner_threads)) if rp.learner_device == "cpu" else 1


def choose_n_actors(*, iteration_s: float, replay_ratio: float, cores: int, learner_threads: int,
                    envs_per_actor: int = 1, actor_s: float | None = None) -> KnobChoice:
    """``N`` by the module's rule from the given numbers (``actor_s=None``: no measured actor, the analytic
    rule ``N = cap``). ``cores``: the host's; ``learner_threads``: what the learner side keeps of them
    (:func:`learner_side_threads`)."""
    for name, v in (("iteration_s", iteration_s), ("replay_ratio", replay_ratio)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ComposerError(f"choose_n_actors: {name} = {v!r}; expected a finite number > 0 (the plan's "
                                "learner iteration and the run's replay ratio). Fix: compose a plan with a feasible "
                                "choice.")
    demand = 1.0 / (iteration_s * replay_ratio)
    cap = int(cores) - 1 - int(learner_threads)
    room = (f"{cores} core(s) less 1 for the host loop and {learner_threads} for the learner side leave "
            f"{max(cap, 0)} for actors")
    uses = (f"the learner consumes {demand:,.0f} env steps/s ({iteration_s * 1e6:,.1f} us per iteration, "
            f"replay ratio {replay_ratio:g}: {1.0 / replay_ratio:g} env steps per update)")
    if actor_s is None:
        value = max(1, cap)
        reason = (f"{value} actor(s) (analytic rule: no actor was measured for this plan, so every core the host "
                  f"loop and the learner leave gets one): {room}; {uses}")
        return KnobChoice("n_actors", value, "analytic", {}, reason, float(iteration_s))
    if not (math.isfinite(actor_s) and actor_s > 0):
        raise ComposerError(f"choose_n_actors: actor_s = {actor_s!r}; expected an actor's measured seconds per "
                            "experience > 0. Fix: profile the host again (pearl compose --profile).")
    rate = 1.0 / actor_s
    need = max(1, math.ceil(demand / rate - 1e-9))
    value = max(1, min(need, cap))
    supply = (f"one actor at {envs_per_actor} env(s) delivers {rate:,.0f} env steps/s ({actor_s * 1e6:,.2f} us "
              f"per experience, measured)")
    if need <= max(cap, 1):
        why = f"the fewest that cover the learner: ceil({demand:,.0f} / {rate:,.0f}) = {need}"
    else:
        why = f"capped by the cores: {need} would cover the learner (ceil({demand:,.0f} / {rate:,.0f}))"
    if cap < 1:
        why += "; no core is left for actors, so the one actor shares a core"
    reason = f"{value} actor(s), {why}; {uses}; {supply}; {room}"
    return KnobChoice("n_actors", value, "composer", {int(envs_per_actor): float(actor_s)}, reason,
                      float(iteration_s))


class RowMemo:
    """A profiler (``(device, workload) -> DeviceRow | None``) that measures each device once: a later call
    returns the row of the first, whatever the workload's actor count (the rows :func:`settle_actors`
    plans again over)."""

    def __init__(self, profiler: "Callable[[DeviceSpec, Workload], DeviceRow | None]"):
        self.profiler = profiler
        self.rows: dict[str, "DeviceRow | None"] = {}

    def __call__(self, device: "DeviceSpec", workload: "Workload") -> "DeviceRow | None":
        if device.name not in self.rows:
            self.rows[device.name] = self.profiler(device, workload)
        return self.rows[device.name]


def host_cores(spec: "HardwareSpec", present: bool) -> int:
    """The host CPU's cores: the spec's (threads, else cores), no more than this process may use when the host
    is this machine."""
    from pearl_core.validation import cpu_count

    host = next(d for d in spec.devices if d.name == spec.host)
    described = int(host.threads or host.cores or 1)
    return min(described, cpu_count()) if present else described


def _actor_s(plan: "PlacementPlan", envs_choice: KnobChoice | None, envs: int) -> float | None:
    """An actor's measured seconds per experience at ``envs`` envs: the envs choice's, else the host row's."""
    if envs_choice is not None and envs in envs_choice.measured_s:
        return float(envs_choice.measured_s[envs])
    host = plan.spec.get("host")
    if host in plan.matrix.devices:
        costs = plan.matrix.row(host).costs
        if costs is not None and costs.actor_step_s and costs.actor_step_s > 0:
            return float(costs.actor_step_s)
    return None


def settle_actors(plan_at: "Callable[[Workload], tuple[PlacementPlan, RuntimePlan, T]]", wl: "Workload", *,
                  spec: "HardwareSpec", present: bool, replay_ratio: float, envs_choice: KnobChoice | None = None,
                  measured: bool = True) -> "tuple[tuple[PlacementPlan, RuntimePlan, T], KnobChoice]":
    """Plan at one actor, choose ``N`` (:func:`choose_n_actors`), plan again at ``N`` until it settles.

    ``plan_at(workload)`` makes ``(placement plan, runtime plan, extra)`` for a workload (over a
    :class:`RowMemo` profiler: the same measured rows each time). ``present``: the spec's host is this
    machine; ``measured``: the plan profiled it (else the analytic rule). Returns the last plan, made at the
    returned choice's value; the choice's reason says when :data:`MAX_PASSES` plans did not settle.
    """
    cores = host_cores(spec, present)
    n = 1
    result = plan_at(dataclasses.replace(wl, n_actors=n))
    choice: KnobChoice | None = None
    for _ in range(MAX_PASSES):
        plan, rp, _ = result
        actor_s = _actor_s(plan, envs_choice, rp.envs_per_actor) if (measured and present) else None
        iteration = plan.chosen.iteration_s
        assert iteration is not None  # the chosen candidate is feasible
        choice = choose_n_actors(iteration_s=float(iteration), replay_ratio=replay_ratio, cores=cores,
                                 learner_threads=learner_side_threads(rp), envs_per_actor=rp.envs_per_actor,
                                 actor_s=actor_s)
        if choice.value == n:
            return result, choice
        n = choice.value
        result = plan_at(dataclasses.replace(wl, n_actors=n))
    assert choice is not None
    note = f" (planned {MAX_PASSES + 1} times without settling: the last plan's is used)"
    return result, dataclasses.replace(choice, reason=choice.reason + note)


def compose_plans(composer: Any, wl: "Workload", preflight: Any, profiler: Any, choose: Any, note: str, *,
                  runnable: bool, measured: bool
                  ) -> "tuple[PlacementPlan, RuntimePlan, list[str], KnobChoice | None]":
    """:meth:`Composer.run <pearl_core.composer.api.Composer.run>`'s plan, runtime plan and refusals for
    ``wl``, and, when the user left ``n_actors`` to the composer, the choice (:func:`settle_actors`; else
    ``None``). ``composer``: the :class:`~pearl_core.composer.api.Composer` composing (its spec, metric,
    registry, actor fields and learner settings); ``choose``/``note``: the user's forced placements;
    ``measured``: the host was profiled."""
    from pearl_core.composer.here import runnable_plan, whatif_refusals
    from pearl_core.composer.plan import make_plan

    auto = composer._n_actors is None
    memo = RowMemo(profiler) if profiler is not None and auto else profiler

    def plan_at(w: "Workload") -> "tuple[PlacementPlan, RuntimePlan, list[str]]":
        plan = make_plan(composer.spec, w, composer.metric, registry=composer.registry, profiler=memo,
                         choose=choose, constraint=note)
        runtime_plan = plan.runtime_plan(**composer._actor_fields())
        refusals = preflight.problems(runtime_plan)
        if runnable:  # a what-if device is refused even where a device of its string is present
            refusals = refusals or whatif_refusals(composer, plan)
        if refusals and runnable:
            plan, runtime_plan, refusals = runnable_plan(composer, plan, w, preflight, choose, note)
        return plan, runtime_plan, refusals

    if not auto:
        return (*plan_at(wl), None)
    (plan, runtime_plan, refusals), choice = settle_actors(
        plan_at, wl, spec=composer.spec, present=composer._host_here(), measured=measured,
        replay_ratio=float(composer._learner["replay_ratio"]), envs_choice=composer._envs_choice)
    return plan, runtime_plan, refusals, choice
