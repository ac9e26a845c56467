"""Validate a trainer class against the trainer contract before a run starts.

:func:`check_trainer` builds the trainer the way PEARL will
(``cls(observation_space, action_space, **hparams)``) and checks, in order:

1. the class is a :class:`~pearl_core.trainer.Trainer` subclass with no abstract
   method left, or a duck-typed class with every method of the contract;
2. the constructor runs (its exception is wrapped with the call that failed);
3. ``input_shape`` equals ``observation_space.shape``;
4. ``action_kind`` matches the action space (``Discrete`` <-> ``"discrete"``,
   ``Box`` <-> ``"continuous"``);
5. at least one ``nn.Linear``/``nn.Conv2d`` layer is reachable from an attribute;
6. ``get_action`` on a batch of ``observation_space.sample()`` returns actions
   of the right shape and dtype inside the action space (with and without
   exploration);
7. ``update_policy`` on a tiny random batch returns ``B`` finite per-sample TD
   errors (and not one scalar loss copied ``B`` times);
8. ``get_weights``/``set_weights`` round-trip;
9. a trainer that declares :attr:`~pearl_core.trainer.Trainer.device_batches` has a torch
   ``device`` and, given the smoke batch as tensors there, returns ``B`` finite TD errors as a
   tensor there (the device path's contract).

Steps 6-8 run on a deep copy of the trainer, inside a forked torch RNG and on
copies of the spaces, so the returned trainer is exactly as constructed and the
caller's random streams are untouched. Every failure raises
:class:`~pearl_core.errors.TrainerError` saying what failed, expected vs found,
and the fix.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Mapping

import numpy as np

from pearl_core.errors import TrainerError
from pearl_core.trainer import Trainer, layer_specs

__all__ = ["REQUIRED_METHODS", "check_trainer", "smoke_batch"]

#: Methods every trainer must provide (the abstract methods of :class:`Trainer`).
REQUIRED_METHODS: tuple[str, ...] = ("get_action", "update_policy", "get_weights", "set_weights")

#: Size of the smoke batches (> 1, so that a copied scalar loss is detectable).
_SMOKE_N = 8


def _name(cls: Any) -> str:
    return getattr(cls, "__qualname__", None) or repr(cls)


def _check_class(trainer_cls: Any) -> None:
    if not inspect.isclass(trainer_cls):
        raise TrainerError(
            f"check_trainer: expected a trainer class; found {trainer_cls!r} ({type(trainer_cls).__name__}). "
            "Fix: pass the class itself (e.g. DQN), not an instance or a string; use "
            "pearl_core.runtime.wiring.load_trainer_class('pkg.mod:Class') to import one by path."
        )
    if issubclass(trainer_cls, Trainer):
        abstract = sorted(getattr(trainer_cls, "__abstractmethods__", ()))
        if abstract:
            raise TrainerError(
                f"trainer class {_name(trainer_cls)} does not implement {abstract}, abstract in "
                f"pearl_core.Trainer. Fix: define {', '.join(m + '()' for m in abstract)} on the class."
            )
        return
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(trainer_cls, m, None))]
    if missing:
        raise TrainerError(
            f"trainer class {_name(trainer_cls)} is not a pearl_core.Trainer subclass and lacks the "
            f"method(s) {missing}; expected all of {list(REQUIRED_METHODS)}. "
            "Fix: subclass pearl_core.trainer.Trainer and implement the missing methods."
        )


def _construct(trainer_cls: type, observation_space, action_space, hparams: Mapping[str, Any]):
    call = (f"{_name(trainer_cls)}(observation_space={observation_space}, action_space={action_space}, "
            f"**{dict(hparams)!r})")
    try:
        return trainer_cls(observation_space, action_space, **hparams)
    except TrainerError:
        raise
    except Exception as exc:  # any constructor failure is reported with context
        try:
            sig = f" Its signature is __init__{inspect.signature(trainer_cls.__init__)}."
        except (TypeError, ValueError):
            sig = ""
        raise TrainerError(
            f"constructing the trainer failed: {call} raised {type(exc).__name__}: {str(exc).rstrip('.')}.{sig} "
            "Fix: the constructor must accept (observation_space, action_space, **hparams) with every "
            "hyper-parameter a keyword; check the trainer_kwargs of the run config."
        ) from exc


def _check_shapes(trainer, observation_space, action_space) -> str:
    cls = _name(type(trainer))
    found = getattr(trainer, "input_shape", None)
    if found is None:
        raise TrainerError(
            f"trainer {cls} has no input_shape; expected input_shape = {observation_space.shape} "
            f"(observation_space.shape). Fix: set self.input_shape = tuple(observation_space.shape) in __init__."
        )
    try:
        found_t = tuple(int(d) for d in found)
    except (TypeError, ValueError):
        found_t = None
    if found_t != tuple(observation_space.shape):
        raise TrainerError(
            f"trainer {cls}: input_shape {found!r} does not match the environment's observation shape "
            f"{tuple(observation_space.shape)}; expected input_shape == observation_space.shape. "
            f"Fix: set input_shape = {tuple(observation_space.shape)} (or wrap the environment so its "
            f"observations have shape {found!r})."
        )
    return _check_action_kind(getattr(trainer, "action_kind", None), action_space, cls)


def _check_action_kind(kind, action_space, cls: str) -> str:
    import gymnasium.spaces as spaces

    if kind not in ("discrete", "continuous"):
        raise TrainerError(
            f"trainer {cls}: action_kind = {kind!r}; expected 'discrete' or 'continuous'. "
            "Fix: set the class attribute action_kind."
        )
    if isinstance(action_space, spaces.Discrete):
        space_kind = "discrete"
    elif isinstance(action_space, spaces.Box):
        space_kind = "continuous"
    else:
        raise TrainerError(
            f"trainer {cls}: action space {action_space} is not supported; expected gymnasium Discrete or Box. "
            "Fix: wrap the environment so its action space is Discrete or Box."
        )
    if kind != space_kind:
        raise TrainerError(
            f"trainer {cls} is a {kind!r} trainer but the environment's action space is "
            f"{type(action_space).__name__} ({action_space}), which needs a {space_kind!r} trainer. "
            f"Fix: use a {space_kind} algorithm (e.g. {'DQN' if space_kind == 'discrete' else 'SAC, TD3 or DDPG'}) "
            "or an environment whose action space matches."
        )
    return kind


def _check_layers(trainer) -> None:
    if not layer_specs(trainer):
        raise TrainerError(
            f"trainer {_name(type(trainer))} holds no nn.Linear or nn.Conv2d layer; PEARL reads the layer "
            "shapes from them for its cost models. Fix: keep the networks as attributes "
            "(self.q_net = nn.Sequential(nn.Linear(...), ...)), built from nn.Linear/nn.Conv2d."
        )


def _sample_obs(observation_space, n: int) -> np.ndarray:
    space = copy.deepcopy(observation_space)
    space.seed(0)
    return np.stack([np.asarray(space.sample()) for _ in range(n)]).astype(observation_space.dtype, copy=False)


def smoke_batch(observation_space, action_space, n: int = _SMOKE_N, seed: int = 0):
    """A random :class:`~pearl_core.replay.Batch` of ``n`` transitions drawn from copies of the spaces.

    Observations and actions come from ``space.sample()`` (on deep copies, so
    the caller's space RNGs do not move); rewards are standard normal and done
    flags fair coin flips. Useful to smoke-test a trainer.
    """
    from pearl_core.replay import Batch, StorageSpec

    spec = StorageSpec.from_spaces(observation_space, action_space)
    rng = np.random.default_rng(seed)
    aspace = copy.deepcopy(action_space)
    aspace.seed(seed + 1)
    return Batch(
        obs=_sample_obs(observation_space, n).astype(spec.obs_dtype, copy=False),
        action=np.stack([np.asarray(aspace.sample()) for _ in range(n)]).astype(spec.action_dtype),
        reward=rng.standard_normal(n).astype(np.float32),
        next_obs=_sample_obs(observation_space, n)[::-1].copy().astype(spec.obs_dtype, copy=False),
        done=rng.random(n) < 0.5,
    )


def _smoke_call(call: str, fn: Any, tail: str) -> Any:
    """``fn()``; any exception it raises becomes a :class:`TrainerError` ``"{call} raised {type}: {exc}{tail}"``."""
    try:
        return fn()
    except Exception as exc:  # wrapped with context
        raise TrainerError(f"{call} raised {type(exc).__name__}: {exc}{tail}") from exc


def _check_actions(trainer, observation_space, action_space, kind: str) -> None:
    cls = _name(type(trainer))
    obs = _sample_obs(observation_space, _SMOKE_N)
    for explore in (True, False):
        call = f"{cls}.get_action(obs of shape {obs.shape}, explore={explore})"
        act = _smoke_call(call, lambda: trainer.get_action(obs, explore),
                          f". Fix: get_action takes a batch of observations (n, *{tuple(observation_space.shape)}) "
                          "as a numpy array and returns n actions.")
        if not isinstance(act, np.ndarray):
            raise TrainerError(
                f"{call} returned {type(act).__name__}; expected a numpy array. "
                "Fix: return e.g. tensor.cpu().numpy()."
            )
        if kind == "discrete":
            expected_shape = (_SMOKE_N,)
            if act.shape != expected_shape or act.dtype.kind not in "iu":
                raise TrainerError(
                    f"{call} returned shape {act.shape} dtype {act.dtype}; expected shape {expected_shape} "
                    "of int64 (one action index per observation). Fix: return actions.astype(np.int64) "
                    "without a trailing axis."
                )
            lo, hi = int(action_space.start), int(action_space.start + action_space.n)
            bad = (act < lo) | (act >= hi)
            if bad.any():
                raise TrainerError(
                    f"{call} returned action {act[bad][0]} outside the action space {action_space}; "
                    f"expected integers in [{lo}, {hi}). Fix: add action_space.start to argmax indices."
                )
        else:
            expected_shape = (_SMOKE_N, *action_space.shape)
            if act.shape != expected_shape or act.dtype.kind != "f":
                raise TrainerError(
                    f"{call} returned shape {act.shape} dtype {act.dtype}; expected shape {expected_shape} "
                    f"of float32 (the action space is {action_space}). Fix: return one continuous action "
                    "per observation, as float32."
                )
            low = np.broadcast_to(action_space.low, action_space.shape)
            high = np.broadcast_to(action_space.high, action_space.shape)
            bad = ~np.isfinite(act) | (act < low) | (act > high)
            if bad.any():
                pos = tuple(int(i) for i in np.argwhere(bad)[0])
                raise TrainerError(
                    f"{call} returned action[{pos}] = {act[pos]!r} outside the action space bounds "
                    f"[{low[pos[1:]]}, {high[pos[1:]]}]; expected finite actions inside the Box. "
                    "Fix: np.clip(action, action_space.low, action_space.high) after adding noise."
                )


def _check_update(trainer, observation_space, action_space) -> None:
    cls = _name(type(trainer))
    batch = smoke_batch(observation_space, action_space)
    weights = np.ones(_SMOKE_N, np.float32)
    call = f"{cls}.update_policy(random batch of B={_SMOKE_N}, weights)"
    result = _smoke_call(call, lambda: trainer.update_policy(batch, weights),
                         ". Fix: update_policy takes a pearl_core.replay.Batch (obs, action, reward, next_obs, "
                         "done; leading axis B) and (B,) float32 importance weights.")
    td = getattr(result, "td_errors", None)
    if td is None:
        raise TrainerError(
            f"{call} returned {type(result).__name__}; expected a pearl_core.trainer.UpdateResult with "
            "td_errors. Fix: return UpdateResult(td_errors=..., metrics={...})."
        )
    if not isinstance(td, np.ndarray):
        raise TrainerError(
            f"{call} returned td_errors of type {type(td).__name__}; expected a numpy array of shape "
            f"({_SMOKE_N},). Fix: td.detach().abs().cpu().numpy()."
        )
    if td.shape != (_SMOKE_N,) or td.dtype.kind != "f":
        raise TrainerError(
            f"{call} returned td_errors of shape {td.shape} dtype {td.dtype}; expected shape ({_SMOKE_N},) "
            "float32/float64, one TD error per sample. Fix: return |Q(s,a) - target| per sample, e.g. "
            "td.reshape(-1)."
        )
    if not np.isfinite(td).all():
        raise TrainerError(
            f"{call} returned non-finite td_errors {td.tolist()}; expected finite values. "
            "Fix: look for a division by zero or a diverging loss on small random batches."
        )
    if np.all(td == td[0]):
        raise TrainerError(
            f"{call} returned {_SMOKE_N} identical td_errors ({td[0]!r}) for {_SMOKE_N} different random "
            "samples; this looks like one scalar loss copied B times, which makes prioritized replay "
            "meaningless. Fix: return the per-sample |Q(s,a) - target| (reduction='none'), not the batch loss."
        )


def _check_device_update(trainer, observation_space, action_space) -> None:
    """Rule 9: the device path of a trainer that declares ``device_batches``."""
    import torch

    from pearl_core.replay import Batch

    cls = _name(type(trainer))
    fix = (f"Fix: give {cls} a torch `device` attribute and return the TD errors of a device batch where the "
           "batch is (td.detach(), no .cpu()), or set device_batches = False to take host batches only.")
    try:
        device = torch.device(getattr(trainer, "device"))
    except (AttributeError, TypeError, RuntimeError) as exc:
        raise TrainerError(f"{cls} declares device_batches = True but has no torch device ({exc}). {fix}") from exc
    host = smoke_batch(observation_space, action_space)
    batch = Batch(*(torch.as_tensor(np.asarray(getattr(host, f)), device=device) for f in
                    ("obs", "action", "reward", "next_obs", "done", "steps")))
    weights = torch.ones(_SMOKE_N, dtype=torch.float32, device=device)
    call = f"{cls}.update_policy(a device batch of B={_SMOKE_N} on {device}, weights)"
    result = _smoke_call(call, lambda: trainer.update_policy(batch, weights), f". {fix}")
    td = getattr(result, "td_errors", None)
    if not isinstance(td, torch.Tensor) or td.device != device:
        where = f"a tensor on {td.device}" if isinstance(td, torch.Tensor) else type(td).__name__
        raise TrainerError(f"{call} returned td_errors as {where}; expected a tensor on {device}. {fix}")
    if tuple(td.shape) != (_SMOKE_N,) or not td.dtype.is_floating_point or not bool(torch.isfinite(td).all()):
        raise TrainerError(f"{call} returned td_errors of shape {tuple(td.shape)} dtype {td.dtype}; expected "
                           f"({_SMOKE_N},) finite floats, one per sample. {fix}")


def _check_weights(trainer) -> None:
    cls = _name(type(trainer))
    weights = _smoke_call(f"{cls}.get_weights()", trainer.get_weights, ".")
    if not isinstance(weights, Mapping) or not all(
        isinstance(k, str) and isinstance(v, np.ndarray) for k, v in weights.items()
    ):
        raise TrainerError(
            f"{cls}.get_weights() returned {type(weights).__name__}; expected a dict of str -> numpy array "
            "(sent to actor processes). Fix: {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}."
        )
    _smoke_call(f"{cls}.set_weights(get_weights())", lambda: trainer.set_weights(weights),
                "; expected the round trip to work. Fix: set_weights must accept exactly what get_weights returns.")


def check_trainer(trainer_cls: type, observation_space, action_space, **hparams: Any) -> Trainer:
    """Build ``trainer_cls(observation_space, action_space, **hparams)`` and validate it.

    Args:
        trainer_cls: a :class:`~pearl_core.trainer.Trainer` subclass, or a
            duck-typed class with ``get_action``, ``update_policy``,
            ``get_weights`` and ``set_weights``.
        observation_space: the environment's observation space.
        action_space: the environment's ``Discrete`` or ``Box`` action space.
        **hparams: keyword hyper-parameters for the constructor.

    Returns:
        The constructed trainer, untouched by the smoke tests (they run on a copy).

    Raises:
        TrainerError: the first rule broken; the message names what was expected,
            what was found, and the fix.
    """
    import torch

    _check_class(trainer_cls)
    declared = getattr(trainer_cls, "action_kind", None)
    if isinstance(declared, str):
        # A class-level action_kind is checked before constructing: a mismatch is the clearer message.
        _check_action_kind(declared, action_space, _name(trainer_cls))
    trainer = _construct(trainer_cls, observation_space, action_space, hparams)
    kind = _check_shapes(trainer, observation_space, action_space)
    _check_layers(trainer)
    try:
        probe = copy.deepcopy(trainer)
    except Exception:  # noqa: BLE001 - an uncopyable trainer is rebuilt instead
        with torch.random.fork_rng(devices=[]):
            probe = _construct(trainer_cls, observation_space, action_space, hparams)
    np_state = np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            _check_actions(probe, observation_space, action_space, kind)
            _check_update(probe, observation_space, action_space)
            _check_weights(probe)
            if getattr(trainer_cls, "device_batches", False):
                _check_device_update(probe, observation_space, action_space)
    finally:
        np.random.set_state(np_state)
    return trainer
