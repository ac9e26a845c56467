"""Environments by id: the one place PEARL calls ``gymnasium.make``.

Actors, the learner, the evaluator, the composer's workload model and the
profiler all build their environments here, so an unknown id, a missing
dependency or a broken constructor reads the same wherever it is found.

**Families** register themselves: an id under ``ALE/`` (or an older Atari id such
as ``PongNoFrameskip-v4``) imports ``ale_py`` (the Atari ROMs ship in its wheel)
and one under ``MinAtar/`` imports ``minatar.gym``
before the id is looked up, so ``make_env("ALE/Pong-v5")`` works in any process
without the user importing anything first. A user's own env is named as
gymnasium names it, ``"module:Env-v0"``: ``module`` is imported (it registers
``Env-v0``) in every process that makes the env (:func:`registered_id`).

**Options** (``RunConfig.env_kwargs`` / ``env_wrappers``, the Composer's
``set_actors(env_id, env_kwargs=..., wrappers=...)``): ``kwargs`` go to
``gymnasium.make``; ``wrappers`` is a sequence applied in order, each a preset
name from :data:`PRESETS` or an import path ``"package.module:callable"`` called
as ``callable(env) -> env`` (import paths, not objects, so the options cross
process boundaries and are written into generated programs), or a dict
``{"wrapper": "package.module:callable", "kwargs": {...}, "envs": "evaluation"}``:
called as ``callable(env, **kwargs)`` (JSON values), on the training
environments, the evaluation ones or ``"all"`` (default), e.g.
``{"wrapper": "gymnasium.wrappers:RecordEpisodeStatistics", "envs": "training"}``. ``wrappers=None``
applies the family's default presets (:func:`default_wrappers`); ``()`` applies
none.

**Presets**:

* ``"atari"`` — the DQN conventions (Mnih et al. 2015, as stable-baselines3's
  ``AtariWrapper`` applies them), on an ALE v5 env made with ``frameskip=1``
  (the preset skips frames itself; ALE v5's other defaults stand, sticky
  actions with probability 0.25 among them): up to 30 no-op actions after
  reset, frame skip 4 with the max over the last two frames, 84x84 grey
  frames, a stack of the last 4 frames (``(4, 84, 84)`` ``uint8``, channels
  first); for training also episodic life (a lost life ends the episode for the
  learner; the game itself resets only when it is over) and rewards clipped to
  their sign; in games whose actions include FIRE, FIRE (then action 2) after
  every reset, as games such as Breakout wait for it. Evaluation environments
  (``evaluation=True``) keep the whole game and its real score (FIRE after the
  game's reset too).
* ``"minatar"`` — MinAtar's ``(10, 10, C)`` boolean grid as ``(C, 10, 10)``
  ``uint8`` (channels first, as PEARL's image trainers read them).
"""

from __future__ import annotations

import difflib
import importlib
import json
from typing import Any, Callable, Mapping, Sequence

from pearl_core.errors import SpecError

__all__ = ["PRESETS", "WRAPPER_ENVS", "WRAPPER_KEYS", "check_env_options", "default_wrappers", "env_spaces",
           "family_distribution", "json_mapping", "make_env", "registered_id"]

#: id prefix -> (the module whose import registers the family, the package that installs it, its default presets).
_FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ALE/": ("ale_py", "ale-py", ("atari",)),
    "MinAtar/": ("minatar.gym", "minatar", ("minatar",)),
}


#: Suffixes of the older Atari ids ale-py registers (``PongNoFrameskip-v4``, rl-zoo's and SB3's Atari ids).
_ATARI_V4 = ("NoFrameskip-v4",)


def _family(env_id: str) -> tuple[str, str, tuple[str, ...]] | None:
    if not isinstance(env_id, str):
        return None
    for prefix, fam in _FAMILIES.items():
        if env_id.startswith(prefix):
            return fam
    if "/" not in env_id and env_id.endswith(_ATARI_V4):
        return _FAMILIES["ALE/"]
    return None


def _register_family(env_id: str, gym) -> None:
    """Import the package that registers ``env_id``'s family (ALE, MinAtar), once per process."""
    fam = _family(env_id)
    if fam is None or env_id in gym.registry:
        return
    module, package, _ = fam
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise SpecError(f"environment {env_id!r} cannot be created: its family needs the package {package!r}, "
                        f"which is not installed ({exc}). Fix: pip install 'pearl-core[pixels]' (or "
                        f"pip install {package}).") from exc
    if module == "ale_py":
        gym.register_envs(mod)
    else:  # minatar.gym registers its ids when asked
        mod.register_envs()


def family_distribution(env_id: str) -> str | None:
    """The distribution whose package registers ``env_id``'s family (``"ale-py"``, ``"minatar"``), else ``None``."""
    fam = _family(env_id)
    return None if fam is None else fam[1]


def default_wrappers(env_id: str) -> tuple[str, ...]:
    """The presets an id's family applies when ``wrappers=None`` (``("atari",)`` for ``ALE/...``)."""
    fam = _family(env_id)
    return fam[2] if fam is not None else ()


# --------------------------------------------------------------------------- presets
#: Keys of a wrapper given as a dict in ``env_wrappers``.
WRAPPER_KEYS = ("wrapper", "kwargs", "envs")
#: Which environments such a wrapper wraps: both, the training ones, the evaluation ones.
WRAPPER_ENVS = ("all", "training", "evaluation")


def _episodic_life(env):
    """A lost life ends the episode for the learner; ``reset`` restarts the game only once it is over
    (otherwise it takes one no-op step from where the life was lost)."""
    import gymnasium as gym

    class EpisodicLife(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.lives = 0
            self.game_over = True

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.game_over = terminated or truncated
            lives = self.env.unwrapped.ale.lives()
            if 0 < lives < self.lives:
                terminated = True
            self.lives = lives
            return obs, reward, terminated, truncated, info

        def reset(self, **kwargs):
            if self.game_over:
                obs, info = self.env.reset(**kwargs)
            else:
                obs, _, terminated, truncated, info = self.env.step(0)
                if terminated or truncated:  # the no-op ended the game: start a new one
                    obs, info = self.env.reset(**kwargs)
            self.lives = self.env.unwrapped.ale.lives()
            self.game_over = False
            return obs, info

    return EpisodicLife(env)


def _fire_reset(env):
    """After every reset, FIRE then action 2 (games that wait for FIRE to start); a step that ends the
    episode resets again."""
    import gymnasium as gym

    class FireReset(gym.Wrapper):
        def reset(self, **kwargs):
            self.env.reset(**kwargs)
            for action in (1, 2):
                obs, _, terminated, truncated, info = self.env.step(action)
                if terminated or truncated:
                    obs, info = self.env.reset(**kwargs)
            return obs, info

    return FireReset(env)


def _atari(env, evaluation: bool):
    import numpy as np
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

    frameskip = env.unwrapped._frameskip if hasattr(env.unwrapped, "_frameskip") else None
    if frameskip != 1:
        raise SpecError(f"wrapper preset 'atari' needs an ALE env made with frameskip=1 (it skips 4 frames itself, "
                        f"taking the max of the last two); found frameskip={frameskip!r}. Fix: drop 'frameskip' "
                        "from env_kwargs (the preset sets it), or use wrappers=() for the env as it is.")
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False,
                             grayscale_obs=True, scale_obs=False)
    if not evaluation:
        env = _episodic_life(env)
    meanings = env.unwrapped.get_action_meanings()
    if len(meanings) >= 3 and meanings[1] == "FIRE":
        env = _fire_reset(env)
    if not evaluation:
        env = TransformReward(env, lambda r: float(np.sign(r)))
    return FrameStackObservation(env, 4)


def _minatar(env, evaluation: bool):
    import gymnasium as gym
    import numpy as np

    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        raise SpecError(f"wrapper preset 'minatar' expects MinAtar's (10, 10, C) grid; found {space}. "
                        "Fix: use it on a 'MinAtar/...' id only.")
    h, w, c = space.shape

    class ChannelsFirst(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(0, 1, (c, h, w), np.uint8)

        def observation(self, obs):
            return np.ascontiguousarray(np.moveaxis(np.asarray(obs, dtype=np.uint8), -1, 0))

    return ChannelsFirst(env)


#: Preset name -> ``(function(env, evaluation) -> env, keyword arguments it needs at make time)``.
PRESETS: Mapping[str, tuple[Callable[[Any, bool], Any], Mapping[str, Any]]] = {
    "atari": (_atari, {"frameskip": 1}),
    "minatar": (_minatar, {}),
}


def json_mapping(value: Any, where: str, what: str, fix: str, error: type[Exception] = SpecError) -> dict[str, Any]:
    """``value`` as a dict, checked: a mapping with str keys and finite JSON values only (it crosses process
    boundaries and is written into generated programs); else ``error`` naming ``where``, ``what`` and ``fix``."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise error(f"{where} = {value!r:.80} is invalid; expected a mapping with str keys ({what}). Fix: {fix}.")
    try:
        json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise error(f"{where} = {value!r:.80} is invalid; expected finite JSON values only (str, int, float, bool, "
                    f"None, lists and dicts of them) ({exc}). Fix: pass plain values (a list instead of an array, "
                    "no NaN or inf).") from None
    return dict(value)


def check_env_options(kwargs: Any, wrappers: Any, label: str = "RunConfig",
                      error: type[Exception] = SpecError) -> tuple[dict[str, Any], tuple[str, ...] | None]:
    """``(kwargs, wrappers)`` normalised: a JSON-valued dict with str keys; ``None`` or a tuple of preset
    names / ``"package.module:callable"`` paths. Raises ``error`` naming the field, expected vs found, the fix."""
    kwargs = json_mapping({} if kwargs is None else kwargs, f"{label}.env_kwargs", "keyword arguments of "
                          "gymnasium.make", "e.g. env_kwargs={'max_episode_steps': 500}", error)
    if wrappers is None:
        return dict(kwargs), None
    if isinstance(wrappers, str) or not isinstance(wrappers, Sequence):
        raise error(f"{label}.env_wrappers = {wrappers!r:.80} is invalid; expected a list of preset names "
                    f"({sorted(PRESETS)}) or import paths 'package.module:callable'. Fix: e.g. wrappers=['atari'].")
    return dict(kwargs), tuple(_wrapper_entry(w, label, error) for w in wrappers)


def _is_path(w: Any) -> bool:
    return isinstance(w, str) and w.count(":") == 1 and all(p.strip() for p in w.split(":"))


def _wrapper_entry(w: Any, label: str, error: type[Exception]) -> "str | dict[str, Any]":
    """One ``env_wrappers`` entry, checked: a preset name or import path (``str``), or a dict
    ``{"wrapper": path, "kwargs": {...}, "envs": "all" | "training" | "evaluation"}`` normalised with every key."""
    if isinstance(w, str):
        if w in PRESETS or _is_path(w):
            return w
        raise error(f"{label}.env_wrappers: {w!r} is invalid; expected a preset name ({sorted(PRESETS)}) or an "
                    "import path 'package.module:callable' (called as callable(env) -> env), or a dict "
                    "{'wrapper': 'package.module:callable', 'kwargs': {...}, 'envs': 'evaluation'}. "
                    "Fix: e.g. 'gymnasium.wrappers:FlattenObservation'.")
    example = ("e.g. {'wrapper': 'gymnasium.wrappers:RecordVideo', 'kwargs': {'video_folder': 'videos'}, "
               "'envs': 'evaluation'}")
    if not isinstance(w, Mapping) or not all(isinstance(k, str) for k in w):
        raise error(f"{label}.env_wrappers: {w!r:.80} is invalid; expected a preset name, an import path "
                    f"'package.module:callable' or a dict with keys {list(WRAPPER_KEYS)}. Fix: {example}.")
    unknown = sorted(set(w) - set(WRAPPER_KEYS))
    if unknown or "wrapper" not in w:
        what = f"has unknown keys {unknown}" if unknown else "has no 'wrapper'"
        raise error(f"{label}.env_wrappers: {dict(w)!r:.120} {what}; expected the keys {list(WRAPPER_KEYS)} "
                    f"('wrapper' required). Fix: {example}.")
    path, kwargs, envs = w["wrapper"], w.get("kwargs") or {}, w.get("envs", "all")
    if not (isinstance(path, str) and (path in PRESETS or _is_path(path))):
        raise error(f"{label}.env_wrappers: 'wrapper' = {path!r:.80} is invalid; expected a preset name or an "
                    f"import path 'package.module:callable'. Fix: {example}.")
    kwargs = json_mapping(kwargs, f"{label}.env_wrappers: the 'kwargs' of {path!r}", "the wrapper's keyword "
                          "arguments", example, error)
    if kwargs and path in PRESETS:
        raise error(f"{label}.env_wrappers: the preset {path!r} takes no kwargs; found {dict(kwargs)!r:.80}. "
                    "Fix: drop them, or name a wrapper by its import path.")
    if envs not in WRAPPER_ENVS:
        raise error(f"{label}.env_wrappers: the 'envs' of {path!r} = {envs!r}; expected one of {list(WRAPPER_ENVS)} "
                    "(the training envs, the evaluation envs, or both). Fix: e.g. 'envs': 'evaluation'.")
    return {"wrapper": path, "kwargs": kwargs, "envs": envs}


def wrapper_parts(w: "str | Mapping[str, Any]") -> tuple[str, dict[str, Any], str]:
    """``(path_or_preset, kwargs, envs)`` of a checked ``env_wrappers`` entry."""
    if isinstance(w, str):
        return w, {}, "all"
    return w["wrapper"], dict(w.get("kwargs") or {}), w.get("envs", "all")


def _import_wrapper(path: str, env_id: str) -> Callable[[Any], Any]:
    module, _, name = path.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"environment {env_id!r}: wrapper {path!r} cannot be imported ({type(exc).__name__}: {exc}). "
                        "Fix: give an importable 'package.module:callable'.") from exc
    if not callable(obj):
        raise SpecError(f"environment {env_id!r}: wrapper {path!r} is {type(obj).__name__}, not callable; expected "
                        "callable(env) -> env.")
    return obj


def registered_id(env_id: str, gym: Any = None) -> str:
    """The registry id ``env_id`` names, with whatever registers it imported.

    ``"module:Env-v0"`` (gymnasium's form) imports ``module`` (which registers
    ``Env-v0`` on import) and returns ``"Env-v0"``; an ``ALE/`` or ``MinAtar/``
    id imports its family; any other id is returned as it is. Each process
    (actors, evaluators, a generated program's workers) resolves the id itself,
    so a ``module:Env-v0`` id works wherever the module is importable.

    Raises:
        SpecError: the module cannot be imported, or the id is not registered
            (close registered ids are listed).
    """
    if gym is None:
        import gymnasium as gym
    if not isinstance(env_id, str) or not env_id:
        raise SpecError(f"environment {env_id!r} cannot be created: expected a gymnasium id such as 'CartPole-v1' "
                        "or 'my_package.envs:MyEnv-v0'.")
    name = env_id
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        if not module or not name or ":" in name:
            raise SpecError(f"environment {env_id!r} cannot be created: expected 'module:EnvId-v0' (one ':' between "
                            "the module that registers the env and its id), e.g. 'my_package.envs:MyEnv-v0'.")
        try:
            importlib.import_module(module)
        except Exception as exc:  # a user's module raises any type on import
            raise SpecError(f"environment {env_id!r} cannot be created: importing {module!r}, which should register "
                            f"{name!r}, failed ({type(exc).__name__}: {exc}). Fix: make {module!r} importable "
                            "(pip install it, or run from its directory with PYTHONPATH=.) and have it call "
                            f"gymnasium.register({name!r}, entry_point=...) at import.") from exc
    _register_family(name, gym)
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=5, cutoff=0.5)
        hint = f"Close matches: {close}." if close else \
            "Fix: use a registered id such as 'CartPole-v1' (gymnasium.pprint_registry() lists them)."
        where = (f" Importing {env_id.partition(':')[0]!r} did not register it." if ":" in env_id else
                 " If a module registers it, name it as 'module:" + name + "' (gymnasium's form), so every process "
                 "of the run imports that module.")
        raise SpecError(f"environment {env_id!r} cannot be created: {name!r} is not a registered gymnasium "
                        f"environment id. {hint}{where}")
    return name


def make_env(env_id: str, seed: int | None = None, *, kwargs: Mapping[str, Any] | None = None,
             wrappers: Sequence[str] | None = None, evaluation: bool = False):
    """``gymnasium.make(env_id, **kwargs)`` with ``wrappers`` applied and its spaces seeded.

    ``wrappers=None`` applies the family's default presets (see the module docstring);
    ``evaluation`` builds an evaluation environment (presets keep the real episode and score).
    The environment is not reset; reset it with ``seed`` (the runtime's
    collector and evaluator do) so its dynamics are seeded too.

    Raises:
        SpecError: gymnasium is not installed, ``env_id`` is not registered
            (close registered ids are listed), the environment needs a package
            that is not installed, its constructor failed, or a wrapper is not
            importable or fails.
    """
    try:
        import gymnasium as gym
    except ImportError as exc:  # pragma: no cover - the rl extra is installed in dev
        raise SpecError("environments need gymnasium, which is not installed. "
                        "Fix: pip install 'pearl-core[rl]'.") from exc
    kwargs, wrappers = check_env_options(kwargs, wrappers)
    name = registered_id(env_id, gym)
    skip = "training" if evaluation else "evaluation"
    names = [wrapper_parts(w) for w in (default_wrappers(name) if wrappers is None else wrappers)]
    names = [(path, kw) for path, kw, envs in names if envs != skip]
    make_kwargs: dict[str, Any] = {}
    for path, _ in names:
        if path in PRESETS:
            make_kwargs.update(PRESETS[path][1])
    make_kwargs.update(kwargs)
    try:
        env = gym.make(name, **make_kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise SpecError(f"environment {env_id!r} cannot be created: it needs a package that is not installed "
                        f"({exc}). Fix: install that package (see the message) or choose another id.") from exc
    except Exception as exc:  # environment constructors raise any type
        raise SpecError(f"environment {env_id!r} cannot be created ({type(exc).__name__}: {exc}). "
                        "Fix: check its keyword arguments and dependencies, or choose another id.") from exc
    try:
        for path, kw in names:
            env = PRESETS[path][0](env, evaluation) if path in PRESETS else _import_wrapper(path, env_id)(env, **kw)
    except SpecError:
        env.close()
        raise
    except Exception as exc:  # a user's wrapper raises any type
        env.close()
        raise SpecError(f"environment {env_id!r}: wrapping it with {[p for p, _ in names]} failed "
                        f"({type(exc).__name__}: "
                        f"{exc}). Fix: check the wrappers and the env's keyword arguments.") from exc
    env = _guard_observation_dtype(env, env_id)
    if seed is not None:
        env.action_space.seed(int(seed))
        env.observation_space.seed(int(seed))
    return env


def _guard_observation_dtype(env: Any, env_id: str) -> Any:
    """``env`` wrapped to refuse observations whose dtype is not its integer ``Box`` space's (images, grids).

    The rule for integer observations (frames): exactly the space's dtype, nothing else. Stored as
    the space's dtype, a wider integer (281 as int64) would wrap (to 25 in uint8) and a float would
    be truncated; PEARL refuses both rather than guess. Float spaces are left alone (their values
    are rounded to the stored float dtype, never wrapped).
    """
    import gymnasium as gym
    import numpy as np

    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) or np.dtype(space.dtype).kind not in "iu":
        return env
    expected = np.dtype(space.dtype)

    class ObservationDtypeGuard(gym.Wrapper):
        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            return self._check(obs, "reset()"), info

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            return self._check(obs, "step()"), reward, terminated, truncated, info

        def _check(self, obs: Any, where: str) -> Any:
            if getattr(obs, "dtype", None) == expected:
                return obs
            raise _observation_dtype_error(env_id, where, obs, space)

    return ObservationDtypeGuard(env)


def _observation_dtype_error(env_id: str, where: str, obs: Any, space: Any) -> Exception:
    """The :class:`~pearl_core.errors.InvalidDTypeError` for an observation whose dtype is not ``space``'s."""
    import numpy as np

    from pearl_core.errors import InvalidDTypeError

    arr = np.asarray(obs)
    found = f"{type(obs).__name__} of dtype {arr.dtype}" if hasattr(obs, "dtype") else \
        f"{type(obs).__name__} (as an array: {arr.dtype})"
    values = ""
    if arr.size and arr.dtype.kind in "iuf":
        values = f", values in [{arr.min().item()!r}, {arr.max().item()!r}]"
    return InvalidDTypeError(
        f"environment {env_id!r}: {where} returned an observation that is a {found}{values}; expected "
        f"{space.dtype}, the dtype of its observation_space {space}. Integer (image) observations must have "
        f"exactly the space's dtype: converting them could wrap values (281 is 25 as uint8) or truncate "
        f"floats, so PEARL refuses. Fix: return np.asarray(obs, dtype=np.{space.dtype}) from the environment "
        "(clip to the space's bounds first), or declare the observation_space with the dtype it returns.")


def env_spaces(env_id: str, *, kwargs: Mapping[str, Any] | None = None, wrappers: Sequence[str] | None = None
               ) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of ``env_id`` with these options; the environment is built and closed.

    Raises:
        SpecError: as :func:`make_env`.
    """
    env = make_env(env_id, kwargs=kwargs, wrappers=wrappers)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
