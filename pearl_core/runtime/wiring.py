"""Building a run's trainer and replay: the constructors every runtime (and the profiler) shares.

Both runtimes build their pieces here, so the serial runtime is a faithful
oracle for the multi-process one: same trainer construction, checks and seeds,
same replay and the same checkpointed replay contents::

    trainer = build_trainer(config, observation_space, action_space, device=plan.learner_device)
    replay = build_replay(config, plan, StorageSpec.from_spaces(observation_space, action_space))
    ...
    state = replay_state(replay)                      # into a checkpoint
    replay = build_replay(config, plan, spec, state=state)   # and back

The rest of a run lives beside it: environments (:mod:`pearl_core.envs`),
acting and evaluation (:mod:`pearl_core.runtime.acting`), the update schedule
and the learner step (:mod:`pearl_core.runtime.step`), the run session
(:mod:`pearl_core.runtime.session`). The trainer's exploration and the
replay's sampler derive from ``config.seed``.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import SpecError
from pearl_core.placement import make_storage, make_tree
from pearl_core.plugins import kernel_lookup
from pearl_core.replay.base import ReplayManager, UniformReplay
from pearl_core.replay.prioritized import PrioritizedReplay
from pearl_core.replay.storage import StorageSpec, load_storage_state
from pearl_core.runtime.framesprobe import resolve_frame_storage
from pearl_core.runtime.config import BUILTIN_TRAINERS, RunConfig, RuntimePlan, resolve_trainer_name
from pearl_core.trainer import Trainer

__all__ = [
    "build_replay",
    "build_trainer",
    "check_n_step",
    "load_trainer_class",
    "replay_beta_steps",
    "replay_state",
    "runtime_hparams",
]

# --------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------
def load_trainer_class(path: str) -> type:
    """Import a trainer class from ``"package.module:ClassName"`` (or a built-in's short name, ``"DQN"``).

    Raises:
        SpecError: the path is malformed, the module cannot be imported, or it
            has no such attribute (close names are suggested), or the attribute
            is not a trainer class: neither a :class:`~pearl_core.trainer.Trainer`
            subclass nor a class with the trainer methods
            (:data:`pearl_core.trainer_check.REQUIRED_METHODS`, the duck-typed
            contract :func:`~pearl_core.trainer_check.check_trainer` accepts).
            Nothing of it is called or built.
    """
    path = resolve_trainer_name(path)  # a built-in's short name ("DQN", "sac") is its import path
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise SpecError(
            f"trainer path {path!r} is malformed; expected 'package.module:ClassName' or a built-in trainer's "
            f"name ({', '.join(sorted(n.upper() for n in BUILTIN_TRAINERS))}). "
            "Fix: e.g. 'pearl_core.algorithms:DQN', or 'DQN'."
        )
    module_name, attr = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(
            f"trainer path {path!r}: module {module_name!r} could not be imported ({type(exc).__name__}: {exc}). "
            "Fix: check the spelling, and that the package is installed or on PYTHONPATH."
        ) from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=5)
            hint = f" Did you mean {close}?" if close else f" It defines {sorted(names)[:20]}."
            raise SpecError(f"trainer path {path!r}: {module_name!r} has no attribute {part!r}.{hint}")
        obj = getattr(obj, part)
    if not inspect.isclass(obj):
        raise SpecError(
            f"trainer path {path!r} names a {type(obj).__name__}, not a class. "
            "Fix: point it at the trainer class itself."
        )
    if not issubclass(obj, Trainer):
        from pearl_core.trainer_check import REQUIRED_METHODS

        missing = [m for m in REQUIRED_METHODS if not callable(getattr(obj, m, None))]
        if missing:
            raise SpecError(
                f"trainer path {path!r} names the class {obj.__module__}.{obj.__qualname__}, which is not a trainer: "
                f"expected a pearl_core.trainer.Trainer subclass (or a class with {list(REQUIRED_METHODS)}); it "
                f"lacks {missing}. Fix: point it at your trainer class, e.g. 'pearl_core.algorithms:DQN'."
            )
    return obj


def runtime_hparams(trainer_cls: type, config: RunConfig, seed: int | None = None,
                    device: str | None = None, kernels: Any = None) -> dict[str, Any]:
    """Hyper-parameters the runtime supplies when the constructor accepts them and the user did not.

    * ``total_env_steps`` = ``config.stop.max_env_steps`` (schedules that span the run);
    * ``seed`` = ``seed`` if given, else ``config.seed`` (exploration streams);
    * ``device`` = ``device`` if given (the plan's learner device, e.g. ``"cuda:0"``);
    * ``learner_kernels`` = ``kernels`` if given (the learner route's lookup, see
      :func:`pearl_core.placement.learner_route`), else
      :func:`pearl_core.plugins.kernel_lookup` of ``device`` (``"cpu"`` if none):
      native learner steps come from the backend that owns the plan's learner device.
    """
    try:
        params = inspect.signature(trainer_cls).parameters
    except (TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    if "total_env_steps" in params and config.stop.max_env_steps is not None:
        out["total_env_steps"] = int(config.stop.max_env_steps)
    if "seed" in params:
        out["seed"] = int(config.seed if seed is None else seed)
    if device is not None and "device" in params:
        out["device"] = str(device)
    if "learner_kernels" in params:
        out["learner_kernels"] = kernels if kernels is not None else kernel_lookup(
            str(device) if device is not None else "cpu")
    return {k: v for k, v in out.items() if k not in config.trainer_kwargs}


def check_n_step(trainer_cls: type, n_step: int, *, error: type[Exception] = SpecError) -> None:
    """Refuse ``n_step > 1`` for a trainer class that does not declare ``supports_n_step = True``.

    Such a trainer would bootstrap an n-step return with ``gamma`` instead of ``gamma ** k``
    (it does not read ``batch.steps``): a silently wrong target, so the run is refused before it starts.
    """
    if int(n_step) > 1 and not getattr(trainer_cls, "supports_n_step", False):
        name = getattr(trainer_cls, "__qualname__", repr(trainer_cls))
        raise error(
            f"replay n_step = {int(n_step)} needs a trainer that bootstraps each sample with gamma ** batch.steps, "
            f"but {name} does not declare supports_n_step = True; expected a trainer that reads batch.steps "
            "(the built-in DQN, DDPG, TD3 and SAC do). Fix: use n_step=1, or make the trainer's target "
            "r + gamma ** batch.steps * (1 - done) * Q'(s') (pearl_core.algorithms.common.bootstrap_discount), "
            "give it a gamma attribute and set supports_n_step = True on the class."
        )


def build_trainer(
    config: RunConfig, observation_space, action_space, *, seed: int | None = None, check: bool = True,
    device: str | None = None, plan: RuntimePlan | None = None, trainer_cls: type | None = None,
) -> Trainer:
    """Import, construct and (by default) validate the run's trainer.

    Seeds torch's global RNG with ``seed`` (default ``config.seed``) first, so the
    same config builds the same initial networks in any process.

    Args:
        config: the run config (``trainer``, ``trainer_kwargs``, ``seed``, ``stop``).
        observation_space, action_space: the environment's spaces.
        seed: override the seed (e.g. per actor); the networks are then synced anyway.
        check: run :func:`pearl_core.trainer_check.check_trainer` (the learner
            should; actor copies of an already-checked class may skip it).
        device: where the trainer's networks live, passed as ``device=`` when the
            constructor takes it and ``trainer_kwargs`` do not set it (actors and
            the host's copies stay on the CPU).
        plan: build *the learner* of this plan instead: on ``plan.learner_device``
            as :func:`pearl_core.placement.learner_route` says (a backend's device
            trainer, torch on the backend's device, or the backend's kernels);
            ``device`` is then ignored.
        trainer_cls: the class ``config.trainer`` names, when the caller holds it
            already (the composer, for a class defined in the user's script).

    Raises:
        SpecError: the trainer path does not resolve, or a trainer that scales its actions onto the Box
            bounds (``scales_action_bounds``) meets bounds it cannot scale (infinite, zero or float32-
            overflowing width: :func:`~pearl_core.algorithms.common.check_action_bounds`), naming the env.
        PlacementError: ``plan`` places the learner where no backend can run it.
        TrainerError: the trainer breaks the contract.
    """
    import torch

    from pearl_core.placement import check_route_taken, learner_route
    from pearl_core.trainer_check import check_trainer

    cls = trainer_cls if trainer_cls is not None else load_trainer_class(config.trainer)
    check_n_step(cls, config.replay.n_step)
    route = None
    factory: Any = cls
    kernels = None
    if plan is not None:
        route = learner_route(cls, plan.learner_device, plan.learner_config(), backends=plan.backends)
        device, kernels = route.torch_device, route.kernels
        factory = route.factory or cls
    if getattr(factory, "scales_action_bounds", False) or getattr(cls, "scales_action_bounds", False):
        from pearl_core.algorithms.common import check_action_bounds

        check_action_bounds(action_space, getattr(cls, "__name__", str(cls)), env=config.env_id)
    kwargs = {**runtime_hparams(cls, config, seed, device, kernels), **config.trainer_kwargs}
    if isinstance(factory, functools.partial):  # a device trainer with its device settings bound
        factory, kwargs = factory.func, {**kwargs, **factory.keywords}
    torch.manual_seed(int(config.seed if seed is None else seed))
    if check:
        trainer = check_trainer(factory, observation_space, action_space, **kwargs)
    else:
        trainer = factory(observation_space, action_space, **kwargs)
    if route is not None:
        check_route_taken(trainer, route)
        check_n_step(type(trainer), config.replay.n_step)  # a backend's device trainer must read steps too
    return trainer


# --------------------------------------------------------------------------------------
# Replay
# --------------------------------------------------------------------------------------
def replay_beta_steps(config: RunConfig) -> int:
    """β annealing length in sample calls: ``replay.beta_steps``, else ``max_env_steps * replay_ratio``, else 100k."""
    if config.replay.beta_steps is not None:
        return int(config.replay.beta_steps)
    if config.stop.max_env_steps is not None:
        return max(1, int(config.stop.max_env_steps * config.replay_ratio))
    return 100_000


def build_replay(
    config: RunConfig,
    plan: RuntimePlan,
    storage_spec: StorageSpec,
    *,
    state: Mapping[str, Any] | None = None,
    rng: np.random.Generator | int | None = None,
) -> ReplayManager:
    """Build the run's replay manager over a fresh :class:`DataStorage`.

    The Data Storage is made on ``plan.storage_device`` and prioritized replay's
    tree by ``plan.rm_backend`` on ``plan.rm_device``
    (``make_sum_tree(capacity, fanout, threads=plan.rm_threads, device=plan.rm_device)``),
    both through :mod:`pearl_core.placement`; uniform replay has no tree.

    Args:
        config: ``replay`` (kind, capacity, fanout, α, β, eps, stratified) and the seed.
        plan: ``rm_backend`` and ``rm_threads``.
        storage_spec: observation/action layout, e.g. ``StorageSpec.from_spaces(...)``.
        state: what :func:`replay_state` returned, to restore contents, priorities
            and the β schedule position (checkpoint resume).
        rng: sampler RNG; default derives from ``config.seed``.

    Raises:
        PlacementError: the RM backend or the storage's device cannot be used here.
        SpecError: ``state`` does not fit this config.
    """
    rc = config.replay
    if rng is None:
        rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), 0x5E1EC7]))
    frames = resolve_frame_storage(config) if plan.storage_device == "cpu" else rc.frame_storage
    storage = make_storage(storage_spec, rc.capacity, plan.storage_device, backends=plan.backends, frames=frames)
    if state is not None:
        load_storage_state(storage, state)
    if rc.kind == "uniform":
        return UniformReplay(storage, rng=rng)
    tree = make_tree(plan.rm_backend, plan.rm_device, rc.capacity, rc.fanout, threads=plan.rm_threads)
    beta_steps = replay_beta_steps(config)
    beta = rc.beta
    if state is not None and "priorities" in state:
        prio = np.asarray(state["priorities"], dtype=np.float64)
        if prio.shape != (storage.size,):
            raise SpecError(
                f"replay state: {prio.shape[0]} priorities for {storage.size} stored transitions; "
                "expected one per transition. Fix: restore from an unmodified checkpoint."
            )
        if storage.size:
            tree.update(np.arange(storage.size, dtype=np.int64), prio)
        # Continue the β schedule where it stopped: same line, shifted start.
        done = int(state.get("sample_steps", 0))
        if done >= beta_steps:
            beta, beta_steps = rc.beta_final, 0
        else:
            beta = rc.beta + (done / beta_steps) * (rc.beta_final - rc.beta)
            beta_steps -= done
    return PrioritizedReplay(
        storage,
        tree,
        alpha=rc.alpha,
        beta=beta,
        beta_final=rc.beta_final,
        beta_steps=beta_steps,
        eps=rc.eps,
        stratified=rc.stratified,
        rng=rng,
    )


def replay_state(replay: ReplayManager) -> dict[str, Any]:
    """Contents of a replay manager for a checkpoint: :meth:`ReplayManager.state_dict` (numpy arrays; see
    :func:`build_replay`)."""
    return replay.state_dict()
