"""From a trained run to a policy in use: load it, act with it, evaluate it, export it.

::

    import pearl_core

    policy = pearl_core.load_policy("runs/demo")       # the run's checkpoint (policy.checkpoint says which)
    action = policy.predict(obs)                       # one observation -> one action, a batch -> a batch
    mean, std = pearl_core.evaluate_policy(policy, n_episodes=10, seed=0)
    policy.export("policy.pt")                         # TorchScript; format="onnx" for ONNX

* :func:`load_policy` — a run directory (its latest checkpoint) or a checkpoint file; rebuilds the
  trainer the checkpoint names with the run's hyper-parameters and loads its state.
* :class:`Policy` — :meth:`Policy.predict` returns actions in the environment's own space
  (``Discrete`` with its ``start``, ``Box`` actions scaled to its bounds), for one observation or a
  batch; :meth:`Policy.export` writes a TorchScript or ONNX module computing the greedy action
  (:mod:`pearl_core.policy_export`).
* :func:`evaluate_policy` — ``(mean, std)`` of undiscounted returns over seeded episodes, with the
  run's own evaluator (:class:`~pearl_core.runtime.acting.Evaluator`).

Security: a checkpoint names its trainer class (``"package.module:ClassName"``) and loading it imports
that module, which runs its code. The checkpoint itself is read with torch's restricted unpickler
(``weights_only=True``: tensors and plain values only), but load only checkpoints whose trainer
modules you trust.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pearl_core.errors import (CheckpointNotFoundError, InvalidValueError, NotACheckpointError, SpecError,
                               TrainerError, TrainerImportError)

__all__ = ["Policy", "evaluate_policy", "find_checkpoint", "load_policy"]

log = logging.getLogger("pearl_core.policy")

#: ``evaluate_policy``'s default for ``env_kwargs`` / ``env_wrappers``: those of the policy's run config.
FROM_RUN: Any = type("FromRun", (), {"__repr__": lambda self: "FROM_RUN"})()


# --------------------------------------------------------------------------------------
# Finding and loading a checkpoint
# --------------------------------------------------------------------------------------
def find_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint file ``path`` names: ``path`` itself if it is a file, else the latest in the directory.

    In a run directory (a run's ``log_dir``) that is ``checkpoint.pt``, the file every runtime keeps
    up to date (the final checkpoint once the run ended). A directory without one: its newest ``*.pt``
    file, else the newest ``*/checkpoint.pt`` one level down (a directory of runs).

    Raises:
        CheckpointNotFoundError: ``path`` does not exist, or the directory holds no checkpoint.
    """
    from pearl_core.runtime.checkpoint import CHECKPOINT_NAME

    p = Path(path).expanduser()
    if not p.exists():
        parent = p.parent
        if parent.is_dir():
            near = difflib.get_close_matches(p.name, [x.name for x in parent.iterdir()], n=3, cutoff=0.6)
            where = f"close names in {str(parent)!r}: {near}" if near else f"{str(parent)!r} has nothing of that name"
        else:
            where = f"its directory {str(parent)!r} does not exist either"
        raise CheckpointNotFoundError(
            f"load_policy: {str(p)!r} does not exist; expected a run directory (a run's log_dir) or a checkpoint "
            f"file (its checkpoint.pt); {where}. Fix: pass the log_dir the run wrote (RunConfig.log_dir, "
            "'runs/pearl' by default) or the path of its checkpoint.pt.")
    if p.is_file():
        return p
    if (p / CHECKPOINT_NAME).is_file():
        return p / CHECKPOINT_NAME
    newest = _newest(f for f in p.glob("*.pt") if f.is_file())
    newest = newest or _newest(f for f in p.glob(f"*/{CHECKPOINT_NAME}") if f.is_file())
    if newest is not None:
        return newest
    found = sorted(x.name for x in p.iterdir())
    hint = (" It holds a run's logs (config.json) but no checkpoint: the run ended before writing one."
            if "config.json" in found else "")
    raise CheckpointNotFoundError(
        f"load_policy: the directory {str(p)!r} holds no checkpoint; expected {CHECKPOINT_NAME} (or another "
        f"*.pt file) in it or in a run directory under it; found {found[:12]}.{hint} Fix: pass the log_dir of a "
        "run that wrote a checkpoint (every run writes one when it ends; RunConfig.checkpoint_every writes "
        "them during the run), or the checkpoint file itself.")


def _newest(files) -> Path | None:
    files = list(files)
    return max(files, key=lambda f: (f.stat().st_mtime, f.name)) if files else None


def load_policy(path: str | os.PathLike, *, device: str = "cpu", observation_space: Any = None,
                action_space: Any = None, trust_modules: bool = False) -> "Policy":
    """Load the policy a PEARL run trained.

    Reads the checkpoint (:func:`find_checkpoint`: a run directory's latest, or the file given; which one
    is in :attr:`Policy.checkpoint`), imports the trainer class its run config names, builds it with the
    run's ``trainer_kwargs`` on ``device`` and loads the checkpoint's trainer state into it.

    **Loading can run code**: the checkpoint names its trainer class (and the env's ``module:`` and wrapper
    paths), and importing a module runs it. Imported without asking: PEARL's own modules and modules this
    process has already imported (your own package, once you ``import`` it). Any other module named by the
    checkpoint is imported only with ``trust_modules=True`` (``pearl eval RUN --trust-checkpoint``); without
    it the load is refused and nothing is imported. The file itself is read with torch's restricted
    unpickler (``weights_only=True``: tensors and plain values, never arbitrary objects).

    Args:
        path: a run directory (``RunConfig.log_dir``) or a checkpoint file.
        device: torch device of the networks (``"cpu"`` by default, whatever device the run trained on).
        observation_space, action_space: the environment's spaces; by default they are read from the
            run's environment (``make_env(config.env_id)`` with its ``env_kwargs`` and wrappers), which
            must then be creatable here.
        trust_modules: import the modules the checkpoint names even when they are neither PEARL's own nor
            imported already (see above).

    Raises:
        CheckpointNotFoundError: ``path`` does not exist, or the directory holds no checkpoint.
        NotACheckpointError: the file is not a readable PEARL checkpoint, or its trainer state does not
            load into the trainer it names.
        TrainerImportError: the trainer class cannot be imported here.
        UntrustedCheckpointError: the checkpoint names modules to import that are not trusted (nothing was
            imported).
        SpecError: the run's environment cannot be created to read its spaces.
    """
    import torch

    from pearl_core.runtime.checkpoint import check_modules, checkpoint_modules, load_checkpoint, load_trainer_state
    from pearl_core.runtime.wiring import build_trainer, load_trainer_class

    ck_path = find_checkpoint(path)
    try:
        ck = load_checkpoint(ck_path)
    except SpecError as exc:
        found = str(exc).split(" Fix:")[0]  # its fix is about resuming a run
        raise NotACheckpointError(
            f"load_policy: {str(ck_path)!r} is not a checkpoint PEARL can read; expected a checkpoint written by "
            f"a PEARL run (its log_dir's checkpoint.pt). Found: {found} Fix: pass a PEARL run's log_dir or its "
            "checkpoint.pt (or an earlier checkpoint of the run, if this one is damaged).") from exc
    cfg = ck.config
    imported = [m for m in checkpoint_modules(cfg) if m in sys.modules]  # importing them again runs nothing
    check_modules(ck, trust_modules=trust_modules, allowed=imported, path=ck_path,
                  fix="import them first (import your package), or pass load_policy(path, trust_modules=True) "
                      "(`pearl eval RUN --trust-checkpoint`)")
    try:
        cls = load_trainer_class(cfg.trainer)
    except SpecError as exc:
        found = str(exc).split(" Fix:")[0]
        raise TrainerImportError(
            f"load_policy: the checkpoint {str(ck_path)!r} was trained by {cfg.trainer!r}, which cannot be "
            f"imported here; expected an importable 'package.module:ClassName'. Found: {found} Fix: install the "
            "package (or put the module on PYTHONPATH / sys.path) that defines the trainer, as when training. "
            "A trainer defined in a script's __main__ is importable only from that script.") from exc
    if observation_space is None or action_space is None:
        from pearl_core.envs import env_spaces

        try:
            obs_space, act_space = env_spaces(cfg.env_id, **cfg.env_options)
        except SpecError as exc:
            raise SpecError(
                f"load_policy: the spaces of the run's environment {cfg.env_id!r} cannot be read: "
                f"{str(exc).split(' Fix:')[0]} Fix: make "
                "the environment creatable here (import the package that registers it), or pass "
                "observation_space= and action_space= to load_policy.") from exc
        observation_space = obs_space if observation_space is None else observation_space
        action_space = act_space if action_space is None else action_space
    if "device" in cfg.trainer_kwargs:  # the run's device is the learner's; the policy goes where asked
        cfg = dataclasses.replace(cfg, trainer_kwargs={**cfg.trainer_kwargs, "device": str(device)})
    with torch.random.fork_rng(devices=[]):  # build_trainer seeds torch's global RNG: leave the caller's alone
        trainer = build_trainer(cfg, observation_space, action_space, check=False, device=str(device),
                                trainer_cls=cls)
    try:
        load_trainer_state(trainer, ck)
    except SpecError as exc:
        raise NotACheckpointError(
            f"load_policy: the trainer state in {str(ck_path)!r} does not load into {cfg.trainer} built with the "
            f"run's trainer_kwargs {dict(ck.config.trainer_kwargs)}; expected the state that trainer saves. Found: "
            f"{str(exc).split(' Fix:')[0]} Fix: load it where the trainer's code is the code that trained it.") from exc
    log.info("loaded %s (%s on %s, %d env steps)", ck_path, cfg.trainer, cfg.env_id, ck.state.env_steps)
    return Policy(trainer, observation_space=observation_space, action_space=action_space, env_id=cfg.env_id,
                  config=ck.config, checkpoint=ck_path, env_steps=ck.state.env_steps)


# --------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------
class Policy:
    """A trained trainer, acting in its environment's spaces.

    Made by :func:`load_policy`, or directly from a trainer in memory:
    ``Policy(trainer, observation_space=env.observation_space, action_space=env.action_space)``.

    Attributes:
        trainer: the underlying trainer (its networks, ``get_action``).
        observation_space, action_space: the environment's spaces.
        env_id: the run's environment id (``None`` if not known).
        config: the run's :class:`~pearl_core.runtime.config.RunConfig` (``None`` if not known).
        checkpoint: the checkpoint file loaded (``None`` for a trainer given directly).
        env_steps: env steps the run had taken at that checkpoint (``None`` if not known).
    """

    def __init__(self, trainer: Any, *, observation_space: Any, action_space: Any, env_id: str | None = None,
                 config: Any = None, checkpoint: str | os.PathLike | None = None, env_steps: int | None = None):
        if not callable(getattr(trainer, "get_action", None)):
            raise InvalidValueError(f"Policy: trainer = {type(trainer).__name__}; expected a trainer with "
                                    "get_action(obs, explore) (a pearl_core.trainer.Trainer).")
        self.trainer = trainer
        self.observation_space = observation_space
        self.action_space = action_space
        self.env_id = env_id if env_id is not None else getattr(config, "env_id", None)
        self.config = config
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.env_steps = env_steps
        self.obs_shape = tuple(int(d) for d in (getattr(observation_space, "shape", None) or ()))
        self.discrete = hasattr(action_space, "n")
        self.action_shape = () if self.discrete else tuple(int(d) for d in action_space.shape)

    def __repr__(self) -> str:
        name = type(self.trainer).__name__
        src = f", checkpoint={str(self.checkpoint)!r}" if self.checkpoint is not None else ""
        return f"Policy({name}, env_id={self.env_id!r}{src})"

    # -- acting ----------------------------------------------------------------------------
    def _batch(self, obs: Any, owner: str = "Policy.predict") -> tuple[np.ndarray, bool]:
        """``(observations as a batch, whether one observation was given)``; bad shapes refused."""
        arr = obs.detach().cpu().numpy() if hasattr(obs, "detach") else np.asarray(obs)
        if arr.dtype.kind not in "biuf":
            raise InvalidValueError(f"{owner}: observations of dtype {arr.dtype}; expected numbers (the "
                                    f"observation space is {self.observation_space}).")
        shape = self.obs_shape
        if arr.shape == shape:
            return arr[None], True
        if arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
            return arr, False
        raise InvalidValueError(
            f"{owner}: observation of shape {arr.shape}; expected one observation of shape {shape} or a batch of "
            f"shape (n, {', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}) (the observation space is "
            f"{self.observation_space}). Fix: pass what the environment's reset/step returns, or a stack of them.")

    def predict(self, obs: Any, deterministic: bool = True) -> Any:
        """Actions in the environment's own space for one observation or a batch.

        Args:
            obs: one observation (shape ``observation_space.shape``) or a batch ``(n, *shape)``.
            deterministic: the greedy/deterministic action (``get_action(obs, explore=False)``: DQN's
                argmax, DDPG/TD3's actor, SAC's ``tanh(mean)``); ``False`` acts with the trainer's
                exploration (ε-greedy, action noise, SAC's sampled action), drawn from its own stream.

        Returns:
            ``Discrete``: an ``int64`` numpy scalar for one observation, ``(n,)`` ``int64`` for a batch
            (the space's ``start`` included). ``Box``: an array of the action shape, or ``(n, *shape)``,
            inside the bounds, of the space's dtype.

        Raises:
            InvalidValueError: ``obs`` has another shape, or is not numeric.
            TrainerError: the trainer returned actions of the wrong shape.
        """
        batch, single = self._batch(obs)
        n = batch.shape[0]
        if n == 0:
            dtype = np.int64 if self.discrete else self.action_space.dtype
            return np.empty((0, *self.action_shape), dtype=dtype)
        actions = self._actions(self.trainer.get_action(batch, not deterministic), n)
        return actions[0] if single else actions

    def _actions(self, out: Any, n: int) -> np.ndarray:
        arr = out.detach().cpu().numpy() if hasattr(out, "detach") else np.asarray(out)
        want = (n, *self.action_shape)
        if arr.shape != want:
            if arr.size != int(np.prod(want)):
                raise TrainerError(
                    f"Policy.predict: {type(self.trainer).__name__}.get_action returned shape {arr.shape} for {n} "
                    f"observations; expected {want} (the action space is {self.action_space}). Fix: return one "
                    "action per observation.")
            arr = arr.reshape(want)
        if self.discrete:
            return arr.astype(np.int64, copy=False)
        dtype = self.action_space.dtype
        return arr.astype(dtype if np.issubdtype(dtype, np.floating) else np.float32, copy=False)

    # -- export ----------------------------------------------------------------------------
    def export(self, path: str | os.PathLike, format: str = "torchscript") -> Path:
        """Write a module computing :meth:`predict`'s deterministic action from a ``float32`` batch.

        The module maps ``obs`` ``(n, *observation_shape)`` ``float32`` (image observations as they are
        stored, e.g. ``uint8`` frames cast to float, not scaled: the module scales them as the trainer
        does) to ``(n,)`` ``int64`` actions (``Discrete``, its ``start`` added) or ``(n, *action_shape)``
        ``float32`` actions inside the ``Box``. Before anything is written its output is checked against
        :meth:`predict` on sampled observations (equal for ``Discrete``, within 1e-5 for ``Box``).

        * ``"torchscript"``: ``torch.jit.load(path)(obs)``.
        * ``"onnx"``: one input ``"obs"``, one output ``"action"``, dynamic batch; needs the ``onnx``
          package (``pip install 'pearl-core[export]'``, which also installs onnxruntime: with it the
          written model is run and checked too).

        Which network: the trainer's own ``export_module()`` if it has one (an ``nn.Module`` mapping the
        float32 batch to actions as above), else its acting network (``acting_net``: DQN's Q network with
        its argmax and input scaling, DDPG/TD3's tanh actor, SAC's mean squashed by tanh, each scaled to
        the Box), else any of its networks that reproduces :meth:`predict`.

        Returns:
            ``path`` as a :class:`~pathlib.Path`.

        Raises:
            InvalidValueError: an unknown ``format``.
            ExportError: no network reproduces :meth:`predict` (define ``export_module()``), the onnx
                package is missing, or the written module's actions differ from :meth:`predict`.
        """
        from pearl_core.policy_export import export_policy

        return export_policy(self, path, format)


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------
class _Acting:
    """``get_action`` for the evaluator, exploring when asked (it always asks for greedy actions)."""

    def __init__(self, policy: Policy, explore: bool):
        self.policy, self.explore = policy, explore

    def get_action(self, obs: np.ndarray, explore: bool) -> np.ndarray:
        return self.policy._actions(self.policy.trainer.get_action(obs, self.explore), len(obs))


def check_env_fits(policy: Policy, env: Any, env_id: str, owner: str) -> None:
    """Raise :class:`InvalidValueError` (``owner`` names the caller) unless ``env``'s spaces are the policy's."""
    obs_shape = tuple(env.observation_space.shape or ())
    if obs_shape != policy.obs_shape or env.action_space != policy.action_space:
        raise InvalidValueError(
            f"{owner}: environment {env_id!r} has observation shape {obs_shape} and actions "
            f"{env.action_space}; expected the policy's, {policy.obs_shape} and {policy.action_space}. Fix: "
            "evaluate on the environment the policy was trained on, with the same env_kwargs and wrappers.")


def evaluate_policy(policy: Policy, env_id: str | None = None, n_episodes: int = 10, seed: int = 0, *,
                    deterministic: bool = True, env_kwargs: Mapping[str, Any] | None = FROM_RUN,
                    env_wrappers: Sequence[str] | None = FROM_RUN, n_envs: int | None = None
                    ) -> tuple[float, float]:
    """``(mean, std)`` of the undiscounted returns of ``n_episodes`` whole episodes.

    Episode ``k`` starts from ``env.reset(seed=seed + k)``, so the same seed gives the same result for
    deterministic actions. Environments are made as the run's evaluations make them
    (``make_env(..., evaluation=True)``: e.g. the Atari preset keeps whole games and real scores).

    Args:
        policy: what :func:`load_policy` returned.
        env_id: the environment (default: the policy's run's ``env_id``).
        n_episodes: episodes to play, ``>= 1``.
        seed: the first episode's reset seed.
        deterministic: greedy actions (``False``: the trainer's exploration, from its own random stream).
        env_kwargs, env_wrappers: ``gymnasium.make`` keyword arguments and wrappers
            (:func:`pearl_core.envs.make_env`); by default the run config's when ``env_id`` is the run's,
            else none and the family's default presets.
        n_envs: environments stepped together (default ``min(n_episodes, 8)``).

    Returns:
        ``(mean, std)`` (population std, as the run's ``evals.csv``), python floats.

    Raises:
        InvalidValueError: bad arguments, no ``env_id`` known, or an environment whose spaces differ from
            the policy's.
        SpecError: the environment cannot be created.
    """
    from pearl_core.envs import make_env
    from pearl_core.runtime.acting import Evaluator

    if not isinstance(policy, Policy):
        raise InvalidValueError(f"evaluate_policy: policy = {type(policy).__name__}; expected a Policy. Fix: "
                                "policy = pearl_core.load_policy(run_dir).")
    for name, value, low in (("n_episodes", n_episodes, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InvalidValueError(f"evaluate_policy: {name} = {value!r}; expected an int >= {low}.")
    if n_envs is not None and (isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1):
        raise InvalidValueError(f"evaluate_policy: n_envs = {n_envs!r}; expected an int >= 1 or None.")
    run_env = env_id is None or env_id == policy.env_id
    env_id = policy.env_id if env_id is None else env_id
    if env_id is None:
        raise InvalidValueError("evaluate_policy: no env_id given and the policy has none (it was not loaded from "
                                "a run). Fix: evaluate_policy(policy, 'CartPole-v1', ...).")
    cfg = policy.config if run_env else None
    if env_kwargs is FROM_RUN:
        env_kwargs = dict(cfg.env_kwargs) if cfg is not None else {}
    if env_wrappers is FROM_RUN:
        env_wrappers = cfg.env_wrappers if cfg is not None else None
    n = int(n_envs) if n_envs is not None else min(int(n_episodes), 8)

    def make(s: int):
        return make_env(env_id, s, kwargs=env_kwargs, wrappers=env_wrappers, evaluation=True)

    evaluator = Evaluator(env_id, int(n_episodes), int(seed), n, env_fn=make)
    try:
        env = evaluator.envs[0]
        check_env_fits(policy, env, env_id, "evaluate_policy")
        result = evaluator.evaluate(_Acting(policy, not deterministic))
    finally:
        evaluator.close()
    return result.mean_return, result.std_return
