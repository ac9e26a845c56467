"""The optimizer construction program: :class:`Composer` and :func:`RuntimeGen` (the paper's Listing 1).

::

    from pearl_core.algorithms import DQN
    from pearl_core.composer import Composer, RuntimeGen

    if __name__ == "__main__":
        composer = Composer(hardware=None, metric="throughput")      # None: the devices detected here
        composer.set_actors("CartPole-v1", n_actors=1)
        composer.set_train_function(DQN, batch_size=64, replay_ratio=0.5, learning_starts=1_000)
        composer.set_replay("prioritized", capacity=100_000, fanout=16)
        composer.set_stop(eval_return=475.0, max_env_steps=100_000)
        plan = composer.run()                  # matrix (profiled + analytic), Algorithm 1, the choice
        RuntimeGen(plan, "runtime.py")         # then: python runtime.py

``composer.run()`` returns a frozen
:class:`~pearl_core.composer.composition.Composition`: the placement plan
(Algorithm 1's choice with every number behind it), the run config, the
runtime plan and the user's script. ``RuntimeGen`` writes it as a program and
needs nothing else.

Order: ``set_actors`` first (the trainer is checked against its environment),
then ``set_train_function``; ``set_replay`` is required too and may come at any
point before ``run()``; ``set_stop``/``set_run`` are optional (default: stop
after 100k env steps; logs in ``runs/pearl``). Every setter validates its
arguments at once and raises a :class:`~pearl_core.errors.PearlError` saying
what was wrong, expected vs found, and the fix; a rejected call changes nothing.

Where the run settings live: batch size, replay ratio (learner updates per env
step) and learning starts belong to the train function (they say how the
learner consumes experience); the replay kind, capacity and fanout (and PER's
α/β) to ``set_replay``; the stop criteria to ``set_stop``; seed, log directory
and checkpoints to ``set_run``.

The workload's insertion batch ``BS_i`` (experiences inserted per learner
iteration) defaults to ``round(1 / replay_ratio)``: with a replay ratio ``r``
every update is matched by ``1/r`` env steps, all of which are inserted.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pearl_core import validation
from pearl_core.composer.algorithm import METRICS
from pearl_core.composer.checkcache import check_trainer_once, learner_preflight
from pearl_core.composer.composition import USER_SCRIPT_MODULE, Composition
from pearl_core.composer.detect import detect_hardware
from pearl_core.composer.plan import PlacementPlan
from pearl_core.composer.runtimegen import env_script, literal, refuse_while_loading, trainer_reference, \
    write_program
from pearl_core.composer.spec import HardwareSpec
from pearl_core.envs import check_env_options, env_spaces
from pearl_core.errors import ComposerError, InvalidValueError, SpecError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.config import check_field

if TYPE_CHECKING:
    from pearl_core.composer.knobs import KnobChoice
    from pearl_core.composer.workload import Workload
    from pearl_core.plugins import PluginRegistry
    from pearl_core.runtime.config import RunConfig

__all__ = ["Composer", "ComposerError", "Composition", "RuntimeGen", "print_plan"]


def _int(where: str, name: str, value: Any, minimum: int, fix: str) -> int:
    return validation.int_at_least(value, f"{where}: {name}", minimum, fix=fix, error=ComposerError)


def _field(where: str, owner: str, name: str, value: Any) -> Any:
    """``value`` checked by the rule of the config field it becomes (:func:`~pearl_core.runtime.config.check_field`)."""
    return check_field(owner, name, value, label=f"{where}: {name}", error=ComposerError)


class Composer:
    """Compose a training run: where the replay manager, learner and Data Storage run, and the program.

    Args:
        hardware: ``None`` (the devices the installed backends detect), a path
            to a hardware-spec TOML file (``docs/hardware-spec.md``), or a
            :class:`~pearl_core.composer.spec.HardwareSpec`.
        metric: ``"throughput"`` (samples/s) or ``"power_efficiency"`` (samples/J).
        profile_iterations: iterations per profiled cell (present devices, cached on disk).
        cache_dir: profiling cache directory (default: the profiler's own).
        registry: plugin registry (default: the installed plugins).
        emulated: count emulated devices (the FPGA Emulation Device) as present,
            so a plan that places primitives on such a device runs there; with
            ``hardware=None`` they are also detected. Their timings are never
            used as the emulated device's (the FPGA's cells stay analytic).
    """

    def __init__(self, hardware: "str | os.PathLike[str] | HardwareSpec | None" = None,
                 metric: str = "throughput", *, profile_iterations: int = 1000,
                 cache_dir: "str | os.PathLike[str] | None" = None, registry: "PluginRegistry | None" = None,
                 emulated: bool = False):
        w = "Composer"
        if metric not in METRICS:
            close = difflib.get_close_matches(str(metric), METRICS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"use one of {list(METRICS)}"
            raise ComposerError(f"{w}: metric = {metric!r} is unknown; expected one of {list(METRICS)}. Fix: {hint}.")
        self.profile_iterations = _int(w, "profile_iterations", profile_iterations, 1, "e.g. 1000")
        if not isinstance(emulated, bool):
            raise ComposerError(f"{w}: emulated = {emulated!r}; expected True or False.")
        self.emulated = emulated
        if hardware is None:
            self.spec = detect_hardware(registry, emulated=emulated)
        elif isinstance(hardware, HardwareSpec):
            self.spec = hardware
        elif isinstance(hardware, (str, os.PathLike)):
            if not Path(hardware).is_file():
                raise ComposerError(f"{w}: hardware = {str(hardware)!r} is not a file; expected a hardware-spec "
                                    "TOML file (docs/hardware-spec.md). Fix: check the path, or pass "
                                    "hardware=None to use the devices detected here.")
            self.spec = HardwareSpec.load(hardware)
        else:
            raise ComposerError(f"{w}: hardware = {hardware!r} ({type(hardware).__name__}); expected None, a path "
                                "to a TOML spec or a HardwareSpec. Fix: e.g. "
                                "Composer(hardware='examples/hardware/this-machine.toml').")
        self.metric = metric
        self.cache_dir = cache_dir
        self.registry = registry
        self._env_id: str | None = None
        self._env_options: tuple[dict[str, Any], tuple[str, ...] | None] = ({}, None)
        self._spaces: tuple[Any, Any] | None = None
        self._n_actors: int | None = 1  # None: the composer chooses (pearl_core.composer.actors)
        self._envs_per_actor: int | None = None  # None: the composer chooses (pearl_core.composer.knobs)
        self._envs_choice: Any = None  # the last run()'s KnobChoice
        self._actors_choice: Any = None  # the last run()'s KnobChoice of n_actors (auto)
        self._vector_backend: str | None = None  # forced by the user; None: the composer's rule
        self._insert_batch: int | None = None
        self._trainer: type | None = None
        self._trainer_kwargs: dict[str, Any] = {}
        self._learner: dict[str, Any] = {}
        self._replay: Any = None
        self._stop: Any = None
        self._run: dict[str, Any] = {}
        self._preflights: dict[str, Any] = {}

    # ------------------------------------------------------------------ setters
    def set_actors(self, env_id: str, n_actors: int | str | None = 1, *, envs_per_actor: int | None = None,
                   insert_batch: int | None = None, env_kwargs: Mapping[str, Any] | None = None,
                   wrappers: Sequence[str] | None = None, vector_backend: str | None = None) -> "Composer":
        """The environment (a gymnasium id) and the actor processes that step it.

        Args:
            env_id: e.g. ``"CartPole-v1"``; checked by creating it once. ``"ALE/..."``
                (Atari, with the ``"atari"`` preset's wrappers) and ``"MinAtar/..."`` ids
                register their families themselves (:mod:`pearl_core.envs`).
            n_actors: actor processes (on the host CPU); ``None`` or ``"auto"``: the composer chooses
                (:mod:`pearl_core.composer.actors`: the fewest whose measured rate covers what the learner
                consumes, within the cores the host loop and the learner leave).
            envs_per_actor: environments each actor steps together (batched inference);
                ``None`` (default): when it profiles this machine's host the composer
                measures it (:func:`~pearl_core.composer.knobs.choose_envs_per_actor`: 1 where
                the learner bounds the run, else the fewest envs within 10% of the fastest
                time per experience); 1 on a what-if plan.
            insert_batch: ``BS_i`` for the cost models, experiences inserted per
                learner iteration (default ``round(1 / replay_ratio)``).
            env_kwargs: keyword arguments of ``gymnasium.make`` (plain values: they are
                written into the generated program).
            wrappers: applied in order, each a preset (``"atari"``, ``"minatar"``) or an
                import path ``"package.module:callable"``; ``None``: the id's family
                presets; ``[]``: none.
            vector_backend: force how each actor steps its environments
                (``RuntimePlan.vector_backend``: ``"loop"``, ``"gym-sync"``, ``"gym-async"``,
                ``"envpool"``); ``None`` (default): the composer's rule
                (:func:`~pearl_core.runtime.vector.choose_vector_backend`).
        """
        w = "Composer.set_actors"
        env_id = _field(w, "RunConfig", "env_id", env_id)
        env_kwargs, wrappers = check_env_options(env_kwargs, wrappers, w, ComposerError)
        from pearl_core.composer.actors import parse_actors

        n_actors = parse_actors(n_actors, w)
        n_actors = n_actors if n_actors is None else _field(w, "RuntimePlan", "n_actors", n_actors)
        if envs_per_actor is not None:
            envs_per_actor = _field(w, "RuntimePlan", "envs_per_actor", envs_per_actor)
        if insert_batch is not None:
            insert_batch = _int(w, "insert_batch", insert_batch, 1, "leave it None to derive it from the replay ratio")
        if vector_backend is not None:
            from pearl_core.runtime.vector import check_vector_backend

            check_vector_backend(vector_backend, env_id, env_kwargs, wrappers, label=f"{w}: vector_backend",
                                 error=ComposerError)
        spaces = _env_spaces(env_id, w, env_kwargs, wrappers, self._facts_dir())
        if self._trainer is not None and (self._env_id, self._env_options) != (env_id, (env_kwargs, wrappers)):
            # The trainer was checked against the previous environment: check it against this one too.
            check_trainer_once(self._trainer, spaces, self._trainer_kwargs, "Composer.set_actors", env_id,
                               self._facts_dir())
        self._env_id, self._spaces, self._env_options = env_id, spaces, (env_kwargs, wrappers)
        self._n_actors, self._envs_per_actor, self._insert_batch = n_actors, envs_per_actor, insert_batch
        self._envs_choice = self._actors_choice = None
        self._vector_backend = vector_backend
        return self

    def set_train_function(self, trainer: "type | str", batch_size: int = 64, *, replay_ratio: float = 0.5,
                           learning_starts: int = 1_000, weight_sync_every: int = 10, random_steps: int = 0,
                           **trainer_kwargs: Any) -> "Composer":
        """The trainer class (policy model + training algorithm) and how the learner consumes experience.

        Args:
            trainer: a :class:`~pearl_core.trainer.Trainer` subclass, or its
                import path ``"package.module:ClassName"``.
            batch_size: ``BS``, experiences per learner update.
            replay_ratio: learner updates per env step (0.5: one update every 2 steps).
            learning_starts: env steps collected before the first update.
            weight_sync_every: learner updates between weight pushes to the actors.
            random_steps: env steps of uniformly random actions at the start of the run (SB3's
                warm-up before ``learning_starts``; 0: the policy acts from the first step).
            **trainer_kwargs: the trainer's hyper-parameters (plain literals only:
                they are written into the generated program).

        The trainer is built and smoke-tested against the environment of
        :meth:`set_actors` (:func:`pearl_core.trainer_check.check_trainer`).
        """
        w = "Composer.set_train_function"
        if self._spaces is None:
            raise ComposerError(f"{w} was called before set_actors; the trainer is checked against the "
                                "environment. Fix: call composer.set_actors('<env id>', ...) first.")
        batch_size = _field(w, "RunConfig", "batch_size", batch_size)
        replay_ratio = float(_field(w, "RunConfig", "replay_ratio", replay_ratio))
        learning_starts = _field(w, "RunConfig", "learning_starts", learning_starts)
        weight_sync_every = _field(w, "RunConfig", "weight_sync_every", weight_sync_every)
        random_steps = _field(w, "RunConfig", "random_steps", random_steps)
        if isinstance(trainer, str):
            from pearl_core.runtime.wiring import load_trainer_class

            try:
                trainer = load_trainer_class(trainer)
            except SpecError as exc:
                raise ComposerError(f"{w}: {exc}") from exc
        if not isinstance(trainer, type):
            raise ComposerError(f"{w}: trainer = {trainer!r} ({type(trainer).__name__}); expected a trainer class "
                                "(e.g. pearl_core.algorithms.DQN) or an import path 'package.module:ClassName'. "
                                "Fix: pass the class itself, not an instance.")
        for key, value in trainer_kwargs.items():
            try:
                literal(value, f"trainer_kwargs[{key!r}]")
            except InvalidValueError as exc:
                raise ComposerError(f"{w}: {exc}") from None
        try:
            trainer_reference(trainer)  # a class the generated program can import (clear error otherwise)
        except InvalidValueError as exc:
            raise ComposerError(f"{w}: {exc}") from None
        if self._replay is not None:
            self._check_n_step(w, trainer, self._replay.n_step)
        check_trainer_once(trainer, self._spaces, trainer_kwargs, w, self._env_id, self._facts_dir())
        self._trainer, self._trainer_kwargs = trainer, dict(trainer_kwargs)
        self._learner = {"batch_size": batch_size, "replay_ratio": replay_ratio, "learning_starts": learning_starts,
                         "weight_sync_every": weight_sync_every, "random_steps": random_steps}
        return self

    def set_replay(self, kind: str = "prioritized", capacity: int = 100_000, fanout: int = 16, *,
                   alpha: float = 0.6, beta: float = 0.4, beta_final: float = 1.0, beta_steps: int | None = None,
                   eps: float = 1e-6, n_step: int = 1, frame_storage: str = "auto") -> "Composer":
        """Uniform or prioritized replay, its capacity and (prioritized) the sum-tree fanout and α/β.

        ``frame_storage`` (``"auto"``, ``"on"``, ``"off"``): store stacked image frames once each in a
        host Data Storage (``"auto"``: for stacks of frames of at least 32x32, the Atari preset's;
        :mod:`pearl_core.replay.frames`).

        ``n_step`` (default 1): n-step returns. It is a replay setting because it decides what the
        replay stores (``(s_t, a_t, sum_{j<k} gamma^j r_{t+j}, s_{t+k}, done, k)``, summed by the
        actors with the trainer's ``gamma``); the trainer must declare ``supports_n_step = True``
        for ``n_step > 1`` (checked as soon as both are set).
        """
        from pearl_core.runtime.config import ReplayConfig

        w = "Composer.set_replay"
        kind = _field(w, "ReplayConfig", "kind", kind)
        capacity = _field(w, "ReplayConfig", "capacity", capacity)
        fanout = _field(w, "ReplayConfig", "fanout", fanout)
        beta_steps = _field(w, "ReplayConfig", "beta_steps", beta_steps)
        alpha, beta, beta_final, eps = (_field(w, "ReplayConfig", name, value) for name, value in (
            ("alpha", alpha), ("beta", beta), ("beta_final", beta_final), ("eps", eps)))
        n_step = _field(w, "ReplayConfig", "n_step", n_step)
        frame_storage = _field(w, "ReplayConfig", "frame_storage", frame_storage)
        self._check_n_step(w, self._trainer, n_step)
        try:
            self._replay = ReplayConfig(kind, capacity, fanout, float(alpha), float(beta), float(beta_final),
                                        beta_steps, float(eps), n_step=n_step, frame_storage=frame_storage)
        except SpecError as exc:
            raise ComposerError(f"{w}: {exc}") from exc
        return self

    @staticmethod
    def _check_n_step(where: str, trainer: "type | None", n_step: int) -> None:
        """n-step returns need a trainer that declares ``supports_n_step``
        (:func:`~pearl_core.runtime.wiring.check_n_step`)."""
        from pearl_core.runtime.wiring import check_n_step

        if trainer is not None:
            try:
                check_n_step(trainer, n_step)
            except SpecError as exc:
                raise ComposerError(f"{where}: {exc}") from None

    def set_stop(self, *, eval_return: float | None = None, eval_every: int | None = None, eval_episodes: int = 20,
                 mean_return: float | None = None, window: int = 20, max_env_steps: int | None = None,
                 max_updates: int | None = None, max_wall_time_s: float | None = None) -> "Composer":
        """When training ends: the first criterion met wins (default, without this call: 100k env steps)."""
        from pearl_core.runtime.config import StopCriteria

        w = "Composer.set_stop"
        given = {"mean_return": mean_return, "window": window, "eval_return": eval_return, "eval_every": eval_every,
                 "eval_episodes": eval_episodes, "max_env_steps": max_env_steps, "max_updates": max_updates,
                 "max_wall_time_s": max_wall_time_s}
        (mean_return, window, eval_return, eval_every, eval_episodes, max_env_steps, max_updates,
         max_wall_time_s) = (_field(w, "StopCriteria", name, value) for name, value in given.items())
        try:
            self._stop = StopCriteria(mean_return, window, eval_return, eval_every, eval_episodes, max_env_steps,
                                      max_updates, max_wall_time_s)
        except SpecError as exc:
            raise ComposerError(f"{w}: {exc} Fix: give at least a budget, e.g. set_stop(max_env_steps=100_000).") \
                from exc
        return self

    def set_run(self, *, seed: int = 0, log_dir: str = "runs/pearl", checkpoint_every: int | None = None,
                save_replay: bool = False) -> "Composer":
        """Seed, log directory (CSV logs, curve, checkpoint, result.json) and checkpoint cadence."""
        w = "Composer.set_run"
        run = {"seed": seed, "log_dir": log_dir, "checkpoint_every": checkpoint_every, "save_replay": save_replay}
        self._run = {name: _field(w, "RunConfig", name, value) for name, value in run.items()}
        return self

    # ------------------------------------------------------------------ composing
    def _missing(self, what: str) -> None:
        missing = []
        if self._env_id is None:
            missing.append("set_actors('<env id>', n_actors=...)")
        if self._trainer is None:
            missing.append("set_train_function(TrainerClass, batch_size=...)")
        if self._replay is None:
            missing.append("set_replay('prioritized' | 'uniform', capacity=..., fanout=...)")
        if missing:
            raise ComposerError(f"{what} needs the environment, the train function and the replay; missing: "
                                f"{', '.join(missing)}. Fix: call " + ", then ".join(missing) + f" before {what}.")

    def run_config(self) -> "RunConfig":
        """The :class:`~pearl_core.runtime.config.RunConfig` of the current settings."""
        from pearl_core.runtime.config import RunConfig, StopCriteria

        self._missing("Composer.run_config()")
        assert self._trainer is not None and self._env_id is not None
        path, _ = trainer_reference(self._trainer)
        try:
            return RunConfig(env_id=self._env_id, trainer=path, trainer_kwargs=dict(self._trainer_kwargs),
                             env_kwargs=dict(self._env_options[0]), env_wrappers=self._env_options[1],
                             replay=self._replay, stop=self._stop or StopCriteria(max_env_steps=100_000),
                             **self._learner, **self._run)
        except SpecError as exc:
            raise ComposerError(f"Composer: the settings do not make a valid run config: {exc}") from exc

    def workload(self) -> "Workload":
        """The :class:`~pearl_core.composer.workload.Workload` the cost models and Algorithm 1 plan for.

        Its ``envs_per_actor`` and ``n_actors`` are the user's, else the last :meth:`run`'s choice, else 1.
        """
        self._missing("Composer.workload()")
        choice = self._envs_choice.value if self._envs_choice is not None else 1
        actors = self._actors_choice.value if self._actors_choice is not None else None
        return self._workload(self._envs_per_actor or choice, actors)

    def _facts_dir(self) -> "Path":
        """Where what the composer learns by building the trainer and the env is kept: the profile cache."""
        from pearl_core.composer.profiling import cache_dir

        return cache_dir(self.cache_dir)

    def _workload(self, envs_per_actor: int, n_actors: int | None = None) -> "Workload":
        from pearl_core.composer.workload import workload_for_env

        insert_batch = self._insert_batch or max(1, round(1.0 / self._learner["replay_ratio"]))
        return workload_for_env(self._env_id or "", self._learner["batch_size"], trainer=self._trainer,
                                trainer_kwargs=self._trainer_kwargs, replay=self._replay.kind,
                                capacity=self._replay.capacity, fanout=self._replay.fanout,
                                n_actors=self._n_actors or n_actors or 1, insert_batch=insert_batch,
                                envs_per_actor=envs_per_actor, env_kwargs=self._env_options[0],
                                env_wrappers=self._env_options[1], frame_storage=self._replay.frame_storage,
                                spaces=self._spaces, facts_dir=self._facts_dir())

    def run(self, profile: bool = True, *, save: "str | os.PathLike[str] | None" = None,
            place: "Mapping[str, str] | None" = None, runnable: bool = False) -> Composition:
        """Fill the Primitive Device Assignment Matrix, run Algorithm 1, and return the :class:`Composition`.

        The composition is a frozen value: the placement plan, the run config and
        runtime plan of the current settings, the user's script, and
        :attr:`~Composition.refusals`: why the plan cannot run here (empty when it
        runs as composed; see :mod:`pearl_core.runtime.preflight`). A plan with
        refusals is a *what-if* plan for hardware described but not here: it can
        be printed and saved, and :func:`RuntimeGen` refuses to write it.

        Args:
            profile: measure the cells of present devices (cached on disk by the
                profiler); ``False`` uses the analytic models only.
            save: also write the placement plan's JSON there (atomically: on any
                error no file is left, an existing file is untouched).
            place: force placements, ``{"rm": <device>, "learner": <device>,
                "storage": <device>}`` (any subset; device names of the spec);
                Algorithm 1 chooses the rest.
            runnable: choose the best plan that can run here (devices present,
                every placement executable by an installed backend) instead of
                the best one for the described hardware.

        Raises:
            ComposerError: bad ``place``, no feasible choice, or (``runnable``) no
                runnable one, with every reason.
        """
        from pearl_core.composer.actors import compose_plans
        from pearl_core.composer.here import fit_threads_here
        from pearl_core.composer.profiling import measurement_session, profiler_for
        from pearl_core.runtime.preflight import Preflight

        refuse_while_loading("Composer.run()")
        self._missing("Composer.run()")
        config = self.run_config()
        forced = self._check_place(place)
        profiler = None
        if profile:
            profiler = profiler_for(self.spec, registry=self.registry, iterations=self.profile_iterations,
                                    cache_dir=self.cache_dir)
        with measurement_session():  # the envs choice and the host's row share the learner step and the replay
            self._envs_choice, self._actors_choice = self._choose_envs(profile), None
            wl = self.workload()
            key = config.to_json()  # the same run is checked once per composer (each probe builds on the device)
            preflight = self._preflights.get(key)
            if preflight is None:
                assert self._trainer is not None and self._spaces is not None  # set_actors/set_train_function ran
                remember = learner_preflight(self._facts_dir(), self._trainer, self._spaces, config, self.registry)
                preflight = self._preflights[key] = Preflight(config, registry=self.registry, emulated=self.emulated,
                                                              trainer_cls=self._trainer, remember=remember,
                                                              spaces=self._spaces)
            choose = (lambda prim, dev: forced.get(prim, dev) == dev) if forced else None
            note = ", ".join(f"{k} on {v!r}" for k, v in forced.items())
            note = f"placements forced by the user ({note})" if note else ""
            try:  # n_actors auto: planned until N settles (pearl_core.composer.actors)
                plan, runtime_plan, refusals, self._actors_choice = compose_plans(
                    self, wl, preflight, profiler, choose, note, runnable=runnable, measured=profile)
            except SpecError as exc:
                raise ComposerError(f"Composer.run(): {exc}") from exc
        notice = None
        if runnable and not refusals:  # a spec of another machine: its thread counts sized to the cores here
            runtime_plan, notice = fit_threads_here(self.spec, runtime_plan, registry=self.registry)
        knobs = {c.name: c.to_dict() for c in (self._envs_choice, self._actors_choice) if c is not None}
        if knobs:  # recorded with the measurements behind them
            plan = dataclasses.replace(plan, tuning={**plan.tuning, "knobs": knobs})
        _, script = trainer_reference(self._trainer)  # type: ignore[arg-type]
        if script is None:  # an env registered by the composing script: the program loads that script too
            try:
                script = env_script(self._env_id)  # type: ignore[arg-type]
            except InvalidValueError as exc:
                raise ComposerError(str(exc)) from exc
        composition = Composition(plan, config, runtime_plan, script, refusals=tuple(refusals),
                                  emulated=self.emulated, checked=True, notices=(notice,) if notice else ())
        if save is not None:
            atomic_write(save, plan.to_json())
        return composition

    def _choose_envs(self, profile: bool) -> "KnobChoice | None":
        """Envs per actor when the user left them to the composer: measured on the host when it is this
        machine and the run profiles, else ``None`` (1, nothing measured)."""
        if self._envs_per_actor is not None or not profile:
            return None
        from pearl_core.composer.knobs import cached_envs_choice

        if not self._host_here():
            return None  # a described host: an actor measured here says nothing about it
        return cached_envs_choice(self._workload(1), cache_dir=self.cache_dir)

    def _host_here(self) -> bool:
        """Whether the spec's host is this machine's CPU (an actor measured here says something about it)."""
        from pearl_core.composer.profiling import present_device

        host = next(d for d in self.spec.devices if d.name == self.spec.host)
        return host.kind == "cpu" and present_device(host, self.registry) is not None

    def _actor_fields(self) -> dict[str, Any]:
        """The runtime plan's fields set by :meth:`set_actors` (``vector_backend`` only when forced;
        ``envs_per_actor`` comes from the plan's workload)."""
        out: dict[str, Any] = {}
        if self._vector_backend is not None:
            out["vector_backend"] = self._vector_backend
        return out

    def _check_place(self, place: "Mapping[str, str] | None") -> dict[str, str]:
        if place is None:
            return {}
        w = "Composer.run"
        if not isinstance(place, Mapping) or not set(place) <= {"rm", "learner", "storage"}:
            raise ComposerError(f"{w}: place = {place!r}; expected a mapping with keys among 'rm', 'learner', "
                                "'storage'. Fix: e.g. place={'learner': 'cpu0'}.")
        names = [d.name for d in self.spec.devices]
        for key, dev in place.items():
            if dev not in names:
                close = difflib.get_close_matches(str(dev), names, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"use one of {names}"
                raise ComposerError(f"{w}: place[{key!r}] = {dev!r} is not a device of the spec {names}. Fix: {hint}.")
        return dict(place)

    def RuntimeGen(self, composition: Composition,  # the paper's name
                   path: "str | os.PathLike[str]" = "runtime.py") -> Path:
        """The same as :func:`RuntimeGen` (``composer.RuntimeGen(composer.run(), path)`` reads as the paper)."""
        return RuntimeGen(composition, path)


def RuntimeGen(composition: Composition, path: "str | os.PathLike[str]" = "runtime.py") -> Path:
    """Write the standalone training program of ``composition`` to ``path`` (atomically) and return the path.

    Args:
        composition: what :meth:`Composer.run` returned, or a
            :class:`~pearl_core.composer.composition.Composition` built from a
            placement plan and its run config.
        path: the program to write (``python <path>`` trains).

    The program's layout and its safety rules are described in
    :mod:`pearl_core.composer.runtimegen`.

    Raises:
        ComposerError: ``composition`` is something else (a bare placement plan
            says where to run, not what to train), a value in it cannot be
            written as a literal, or ``path``'s directory does not exist or
            ``path`` is a directory. Nothing is written then.
        OSError: the write itself failed; an existing file at ``path`` is untouched.
    """
    refuse_while_loading("RuntimeGen")
    if isinstance(composition, PlacementPlan):
        raise ComposerError("RuntimeGen: got a PlacementPlan alone; expected the Composition that Composer.run() "
                            "returns (a placement plan says where to run, not what to train). Fix: "
                            "plan = composer.run(); RuntimeGen(plan, path), or for a plan from make_plan: "
                            "RuntimeGen(Composition(placement_plan, run_config), path).")
    if not isinstance(composition, Composition):
        raise ComposerError(f"RuntimeGen: composition = {composition!r:.80} ({type(composition).__name__}); "
                            "expected the Composition that Composer.run() returns. Fix: plan = composer.run(); "
                            "RuntimeGen(plan, path).")
    refusals = list(composition.refusals) or _preflight(composition)
    if refusals:
        raise ComposerError(
            "RuntimeGen: this plan cannot run here, so no program was written (a what-if plan for hardware "
            "described but not here):\n  - " + "\n  - ".join(refusals) + "\nFix: run it where those devices are; "
            "or compose the best plan that runs here with composer.run(runnable=True) (`pearl compose --runnable`)"
            "; or, for an emulated device, Composer(..., emulated=True) (`--emulated`).")
    try:
        return write_program(composition, path)
    except InvalidValueError as exc:
        raise ComposerError(str(exc)) from exc


def _preflight(composition: Composition) -> list[str]:
    """The refusals of a composition built by hand (``Composer.run()`` has already checked its own)."""
    from pearl_core.runtime.preflight import Preflight

    if composition.checked:
        return []
    trainer_cls = None
    if composition.user_script and composition.config.trainer.startswith(USER_SCRIPT_MODULE + ":"):
        # the trainer lives in the user's script: reach it as the program will
        from pearl_core.composer.runtimegen import load_script_module

        qualname = composition.config.trainer.partition(":")[2]
        try:
            trainer_cls = load_script_module(composition.user_script)
            for part in qualname.split("."):
                trainer_cls = getattr(trainer_cls, part)
        except Exception as exc:  # noqa: BLE001 - a refusal with its reason, not a crash
            return [f"learner: the trainer {composition.config.trainer!r} could not be loaded from "
                    f"{composition.user_script!r} ({type(exc).__name__}: {exc}). Fix: keep the script where it was "
                    "composed, or move the trainer into a module."]
    return Preflight(composition.config, emulated=composition.emulated,
                     trainer_cls=trainer_cls).problems(composition.runtime_plan)


def print_plan(plan: "Composition | PlacementPlan") -> None:
    """Print the plan as ``pearl plan`` does: matrix, RM x learner grid, candidates, DS costs, the choice."""
    from rich.console import Console

    from pearl_core.composer.render import render_plan

    render_plan(plan, Console(width=max(132, Console().width)))


# ----------------------------------------------------------------------------- helpers
def _env_spaces(env_id: str, where: str, kwargs: Mapping[str, Any] | None = None,
                wrappers: Sequence[str] | None = None, facts_dir: "Path | None" = None) -> tuple[Any, Any]:
    from pearl_core.composer.spacecache import remembered_spaces

    try:  # an installed env's spaces are remembered across composes (no import of its package)
        return remembered_spaces(facts_dir, env_id, kwargs, wrappers,
                                 lambda: env_spaces(env_id, kwargs=kwargs, wrappers=wrappers))
    except SpecError as exc:
        raise ComposerError(f"{where}: {exc}") from exc

