"""The runtime knobs the composer chooses besides devices, protocol setting and threads.

Algorithm 1 places the primitives; :mod:`pearl_core.composer.tuning` picks the
protocol setting and the thread split on the host. Three more fields of a run
change its speed without changing what one update learns from:

``envs_per_actor`` (chosen here)
    Environments each actor steps together: one batched policy forward for all
    of them, then each one's ``step``. The forward's fixed cost (the engine's call,
    small GEMMs) is shared, so an actor's time per experience falls as ``envs_per_actor``
    grows, until the environments' own steps dominate. On a machine whose cores the
    actors share with the learner, that time is taken from the learner, but only
    where it is a real part of an update: measured with ``benchmarks/runtime_knobs.py``
    (``benchmarks/results/runtime_knobs.md``, 2-CPU VM) DQN 64-64 at batch 32 ran 1.83x
    faster with 8 envs per actor than with 1, while DQN 256-256 at batch 64 (the demo's
    workload, learner-bound) gained nothing (0.77-0.98x, within the runs' spread).
    When the user leaves it unset (``Composer.set_actors(envs_per_actor=None)``, the
    default) and the composer profiles this machine's host, :func:`choose_envs_per_actor`
    measures an actor's time per experience
    (:func:`~pearl_core.composer.profiling.profile_actor_step`, the real policy and
    environments) at each of :data:`ENVS_CANDIDATES` and the learner's step on one
    thread. Where the actors' time per update at one env each (``BS_i`` experiences)
    is under :data:`ACTOR_SHARE` of the learner's step it keeps 1 (and measures no other
    count: none could change that); else it takes the
    fewest environments within :data:`ENVS_TIE` of the fastest time per experience
    (fewer environments: less memory, and each experience reaches the replay sooner).
    Without profiling (a what-if plan) it stays 1.

``insert_batch`` and ``weight_sync_every`` (left at their defaults, 32 and 10)
    Measured with the same benchmark, both matter at their extremes (one transition
    per message: 0.37x and 0.64x; 4 per message: 0.70x and 0.75x; weights after every
    update: 0.72x and 0.81x), which the defaults avoid; 128 transitions per message
    (1.14x, 0.96x) and weights every 100 updates (0.94x, 0.78x) stayed within the runs'
    own spread of the defaults. The composer keeps them; a user may still set them.

The choice is recorded where the runtime reads it: the workload the plan is made
for (so the profiled cells and the calibration runs use it), hence
:meth:`~pearl_core.composer.plan.PlacementPlan.runtime_plan`'s ``envs_per_actor``,
and, with the measurements behind it, in the placement plan's
``tuning["knobs"]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from pearl_core.composer.workload import Workload

__all__ = ["ACTOR_SHARE", "ENVS_CANDIDATES", "ENVS_TIE", "KnobChoice", "cached_envs_choice", "choose_envs_per_actor"]

# How many actors (``n_actors``) the composer chooses from these measurements: pearl_core.composer.actors.

#: The envs-per-actor values measured (one actor process steps that many environments).
ENVS_CANDIDATES: tuple[int, ...] = (1, 2, 4, 8, 16)
#: Within this fraction of the fastest time per experience, the fewest environments win.
ENVS_TIE = 0.10
#: Below this ratio of the actors' time per update (one env each) to the learner's step, the learner bounds the
#: run and envs per actor stay 1 (``benchmarks/results/runtime_knobs.md``: DQN 256-256 at batch 64, ratio 0.15,
#: gained nothing from more envs; 64-64 at batch 32, ratio 2.0, ran 1.8x faster with 8).
ACTOR_SHARE = 0.5


@dataclass(frozen=True)
class KnobChoice:
    """One knob's value, who chose it, and the measurements behind a composer's choice.

    Attributes:
        name: the field (``"envs_per_actor"``, or ``"n_actors"``: :mod:`pearl_core.composer.actors`).
        value: the value the run uses.
        chosen_by: ``"composer"`` (measured here) or ``"analytic"`` (a what-if plan's actor count, by a rule
            without measurements): only the composer's choices are recorded (a user's value, or a what-if
            plan's 1 env per actor, is in the workload and the runtime plan alone).
        measured_s: per candidate value, the measured seconds (an actor's time per
            experience at each envs per actor; for ``n_actors``, at the envs per actor used).
        reason: one sentence for people.
        learner_s: the learner's measured step (one thread) the actors were compared with (``n_actors``:
            the plan's learner iteration); 0 if none.
    """

    name: str
    value: int
    chosen_by: str
    measured_s: Mapping[int, float] = dataclasses.field(default_factory=dict)
    reason: str = ""
    learner_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"value": int(self.value), "chosen_by": self.chosen_by,
                "measured_s": {str(k): float(v) for k, v in sorted(self.measured_s.items())},
                "reason": self.reason, "learner_s": float(self.learner_s)}


def choose_envs_per_actor(wl: Workload, *, candidates: tuple[int, ...] = ENVS_CANDIDATES, iterations: int = 500,
                          measure: Callable[..., float] | None = None,
                          learner: Callable[..., float] | None = None) -> KnobChoice:
    """Envs per actor for ``wl`` (see the module docstring): 1 where the actors' time per update is under
    :data:`ACTOR_SHARE` of the learner's step, else the fewest environments whose measured time per
    experience is within :data:`ENVS_TIE` of the fastest candidate's.

    ``measure(workload, iterations=...)`` returns an actor's seconds per experience (default
    :func:`~pearl_core.composer.profiling.profile_actor_step`); ``learner(workload)`` the learner's
    seconds per step on one thread (default :func:`~pearl_core.composer.profiling.profile_learner`).
    """
    from pearl_core.composer.profiling import profile_actor_step, profile_learner

    if measure is None:  # the real measurement, time-bounded like the CPU row's cells
        def measure(w: Workload, iterations: int) -> float:
            return profile_actor_step(w, iterations=iterations, budget_s=1.0)
    # the one-thread step the CPU row measures too (profiling.measurement_session: measured once)
    learner = learner or (lambda w: profile_learner(w, threads=1, iterations=100, warmup=10, budget_s=1.0))

    def time_at(e: int) -> float:
        return float(measure(dataclasses.replace(wl, envs_per_actor=int(e)), iterations=iterations))

    step = float(learner(dataclasses.replace(wl, envs_per_actor=1)))
    times = {1: time_at(1)}
    actors = int(wl.insert_batch or wl.n_actors) * times[1]  # actor CPU time per update at one env each
    if actors < ACTOR_SHARE * step:  # the learner bounds the run: no other count could change the choice
        reason = (f"1 env per actor: the actors take {actors * 1e6:,.1f} us per update at one env each, under "
                  f"{ACTOR_SHARE:.0%} of the learner's {step * 1e6:,.1f} us step, so the learner bounds the run "
                  f"(an actor's time per experience at 1 env: {times[1] * 1e6:,.1f} us; other counts not measured: "
                  "none could change this)")
        return KnobChoice("envs_per_actor", 1, "composer", times, reason, step)
    times.update({int(e): time_at(e) for e in sorted(set(candidates) - {1})})
    shown = ", ".join(f"{e}: {t * 1e6:,.1f} us" for e, t in sorted(times.items()))
    best = min(times.values())
    value = min(e for e, t in times.items() if t <= best * (1.0 + ENVS_TIE))
    reason = (f"{value} env(s) per actor: the actors take {actors * 1e6:,.1f} us per update at one env each, "
              f"{actors / step:.0%} of the learner's {step * 1e6:,.1f} us step; an actor's time per experience "
              f"({shown}): the fewest environments within {ENVS_TIE:.0%} of the fastest")
    return KnobChoice("envs_per_actor", value, "composer", times, reason, step)


def _machine() -> str:
    from pearl_core.composer.detect import cpu_model

    return f"{cpu_model()} x{os.cpu_count()}"


def cached_envs_choice(wl: Workload, *, cache_dir: "str | os.PathLike[str] | None" = None,
                       candidates: tuple[int, ...] = ENVS_CANDIDATES) -> KnobChoice:
    """:func:`choose_envs_per_actor`, kept in the profile cache (:func:`~pearl_core.composer.profiling.cache_dir`)
    under the workload (its envs per actor aside), this machine's CPU and the candidates: composing the
    same run again gives the same choice, so its profiled row and calibration runs are found again too."""
    from pearl_core._version import __version__
    from pearl_core.composer.profiling import cache_dir as profile_cache_dir
    from pearl_core.fileio import atomic_write

    inputs = {"workload": {k: v for k, v in wl.to_dict().items() if k != "envs_per_actor"}, "machine": _machine(),
              "candidates": list(candidates), "tie": ENVS_TIE, "pearl": __version__}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
    path = Path(profile_cache_dir(cache_dir)) / f"knob-envs-{key[:40]}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") == key:
            return KnobChoice("envs_per_actor", int(data["value"]), "composer",
                              {int(k): float(v) for k, v in data["measured_s"].items()}, str(data["reason"]),
                              float(data["learner_s"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent or damaged: measured again and rewritten
    choice = choose_envs_per_actor(wl, candidates=candidates)
    try:
        atomic_write(path, json.dumps({"key": key, "inputs": inputs, **choice.to_dict()}, sort_keys=True, indent=1,
                                      default=str), make_parents=True)
    except OSError:
        pass  # an unwritable cache costs a measurement next time, nothing else
    return choice
