"""Presets: rl-baselines3-zoo's published hyper-parameters for PEARL's built-in DQN, DDPG, TD3 and SAC.

The data ships in this package, one TOML file per algorithm (``dqn.toml``, ``ddpg.toml``, ``td3.toml``,
``sac.toml``): each entry keeps rl-zoo's raw keys and values (``[presets."<env id>".rlzoo]``) with the
repository, file and commit they were read from, and the stable-baselines3 defaults an entry relies on
(``[sb3_defaults]``). :mod:`pearl_core.presets.rlzoo` maps them at load time onto the trainers'
constructor keywords and the run settings; keys PEARL cannot apply are named in
:attr:`Preset.not_applied`, each with why.

Use::

    preset = find_preset("dqn", "CartPole-v1")        # None: no preset (see no_preset_note)
    preset = preset.override(batch_size=args.batch)    # None = not given; given values win
    print("\\n".join(preset.lines()))
    RunConfig(env_id=..., trainer=preset.trainer, trainer_kwargs=preset.trainer_kwargs,
              batch_size=preset.batch_size, learning_starts=preset.learning_starts,
              random_steps=preset.random_steps, replay_ratio=preset.replay_ratio,
              train_every=preset.train_every,
              replay=ReplayConfig(kind=preset.replay_kind, capacity=preset.capacity, n_step=preset.n_step),
              env_wrappers=preset.env_wrappers,
              stop=StopCriteria(max_env_steps=preset.max_env_steps), ...)

Lookup (:func:`find_preset`): the env id exactly, else an entry whose ``match`` patterns cover it (the
DQN ``atari`` entry: ``*NoFrameskip-v4`` and ``ALE/*-v5``, as rl-zoo applies it to every Atari env). rl-zoo
publishes MuJoCo entries for ``-v4`` ids only: ``Hopper-v5`` has no preset (:func:`no_preset_note` names
``Hopper-v4``).

A user's preset file (:func:`load_preset_file`, ``pearl train --preset FILE``) has the same format::

    [source]
    algo = "td3"                       # required: dqn, ddpg, td3 or sac
    repository = "my notes"            # optional, free text (also file, commit)

    [presets."Hopper-v5".rlzoo]        # one or more entries, rl-zoo keys and values
    n_timesteps = 1e6
    learning_rate = 1e-3
    noise_type = "normal"
    noise_std = 0.1
    policy_kwargs = "dict(net_arch=[400, 300])"

    [presets."Hopper-v5".trainer_kwargs]   # optional: PEARL constructor keywords, applied last
    max_grad_norm = 10.0

``[sb3_defaults]`` is optional there: the packaged ones of the algorithm apply, updated by the file's.
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
import functools
import inspect
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pearl_core.errors import SpecError
from pearl_core.presets.rlzoo import ALGOS, TRAINERS, hidden_keywords, map_entry

__all__ = ["ALGOS", "Preset", "find_preset", "load_preset_file", "no_preset_note", "preset_envs"]

_TOP_KEYS = ("source", "sb3_defaults", "presets")
_ENTRY_KEYS = ("rlzoo", "status", "match", "merged_from", "trainer_kwargs")
#: Preset fields :meth:`Preset.override` accepts (``trainer_kwargs`` merges key by key).
OVERRIDABLE = ("trainer_kwargs", "batch_size", "capacity", "learning_starts", "random_steps", "replay_ratio",
               "train_every", "max_env_steps", "hidden", "replay_kind", "n_step", "env_wrappers")


@dataclass(frozen=True)
class Preset:
    """One algorithm's hyper-parameters for one environment, mapped onto PEARL.

    Attributes:
        algo: ``"dqn"``, ``"ddpg"``, ``"td3"`` or ``"sac"``.
        env_id: the environment it was asked for (``"ALE/Pong-v5"``; the entry may be ``"atari"``).
        source: where the values come from (repository, file, commit and entry).
        trainer_kwargs: the trainer's constructor keywords, complete (hidden sizes included):
            ``RunConfig.trainer_kwargs``.
        batch_size: samples per learner update (rl-zoo ``batch_size``).
        capacity: replay capacity (``buffer_size``).
        learning_starts: env steps before the first update.
        replay_ratio: learner updates per env step, ``gradient_steps / (train_freq * n_envs)``
            (``gradient_steps = -1``: as many updates as env steps collected, ratio 1).
        max_env_steps: the run's budget in env steps (``n_timesteps``).
        hidden: hidden layer sizes (``net_arch``; for DQN on images the head after the conv stack).
        not_applied: ``"key = value: why"`` for each rl-zoo setting PEARL does not apply.
        trainer: import path of the built-in trainer (``RunConfig.trainer``).
        entry: the entry's key in the data (``"CartPole-v1"``, ``"atari"``).
        status: rl-zoo's comment on the entry (``"Tuned"``, ``"To be tuned"``, ``""``).
        train_every: env steps between bursts of updates (``train_freq * n_envs``).
        random_steps: env steps of uniformly random actions at the start (SB3 acts at random
            until ``learning_starts``).
        replay_kind: ``"uniform"`` (SB3's replay buffer).
        n_step: n-step returns (``n_steps``, ``ReplayConfig.n_step``).
        env_wrappers: ``RunConfig.env_wrappers`` the entry needs (``("atari",)``), ``None``: the id's own.
        notes: how values were converted where the mapping is not one to one.
        rlzoo: the entry's raw published keys and values.
        given: the fields set by :meth:`override`.
    """

    algo: str
    env_id: str
    source: str
    trainer_kwargs: dict[str, Any] = field(hash=False)
    batch_size: int
    capacity: int
    learning_starts: int
    replay_ratio: float
    max_env_steps: int
    hidden: tuple[int, ...] | None
    not_applied: tuple[str, ...] = ()
    trainer: str = ""
    entry: str = ""
    status: str = ""
    train_every: int = 1
    random_steps: int = 0
    replay_kind: str = "uniform"
    n_step: int = 1
    env_wrappers: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()
    rlzoo: Mapping[str, Any] = field(default_factory=dict, hash=False)
    given: tuple[str, ...] = ()

    def override(self, **given: Any) -> Preset:
        """A new preset in which the values given win; ``None`` means not given.

        Accepts the fields in :data:`OVERRIDABLE`; ``trainer_kwargs`` is merged key by key. Consequences
        follow unless given too: ``hidden`` sets the trainer's hidden-size keywords, ``max_env_steps``
        sets DQN's ``total_env_steps`` (so ε still decays over rl-zoo's fraction of the run), and
        ``learning_starts`` moves ``random_steps`` with it when the two were equal (SB3's warm-up).
        DQN's ``target_update_every`` (converted with the preset's own ``train_every`` and ``replay_ratio``)
        stays as it is when those two are given: give it in ``trainer_kwargs`` to change it too.
        """
        unknown = sorted(set(given) - set(OVERRIDABLE))
        if unknown:
            close = difflib.get_close_matches(unknown[0], OVERRIDABLE, n=1)
            raise SpecError(f"Preset.override: {unknown} {'is' if len(unknown) == 1 else 'are'} not a preset "
                            f"setting; expected some of {list(OVERRIDABLE)}. Fix: "
                            + (f"did you mean {close[0]!r}?" if close else "pass trainer keywords in trainer_kwargs."))
        values = {k: v for k, v in given.items() if v is not None}
        kwargs = dict(self.trainer_kwargs)
        given_kwargs = values.pop("trainer_kwargs", {})
        if not isinstance(given_kwargs, Mapping) or not all(isinstance(k, str) for k in given_kwargs):
            raise SpecError(f"Preset.override: trainer_kwargs = {given_kwargs!r:.80}; expected a mapping with str "
                            "keys. Fix: e.g. trainer_kwargs={'gamma': 0.98}.")
        explicit = dict(given_kwargs)
        own = "hidden_sizes" if self.algo == "dqn" else "actor_hidden"
        if "hidden" not in values and isinstance(explicit.get(own), (list, tuple)):
            values["hidden"] = explicit[own]  # keep the hidden field in step with an explicit keyword
        for name in ("batch_size", "capacity", "train_every", "max_env_steps", "n_step"):
            _check_int(values, name, 1)
        for name in ("learning_starts", "random_steps"):
            _check_int(values, name, 0)
        if "replay_ratio" in values:
            ratio = values["replay_ratio"]
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
                raise SpecError(f"Preset.override: replay_ratio = {ratio!r}; expected a number > 0. Fix: e.g. "
                                "replay_ratio=0.5 (one update per 2 env steps).")
            values["replay_ratio"] = float(ratio)
        if "hidden" in values:
            sizes = values["hidden"]
            if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__") or not sizes or not all(
                    isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
                raise SpecError(f"Preset.override: hidden = {sizes!r}; expected one or more layer sizes >= 1. "
                                "Fix: e.g. hidden=(256, 256).")
            values["hidden"] = tuple(sizes)
            kwargs.update(hidden_keywords(self.algo, values["hidden"]))
        if "env_wrappers" in values:
            values["env_wrappers"] = tuple(values["env_wrappers"])
        if "max_env_steps" in values and "total_env_steps" in kwargs:
            kwargs["total_env_steps"] = values["max_env_steps"]
        if ("learning_starts" in values and "random_steps" not in values
                and self.random_steps == self.learning_starts):
            values["random_steps"] = values["learning_starts"]
        kwargs.update(explicit)
        marks = set(self.given) | {k for k in values} | {f"trainer_kwargs.{k}" for k in explicit}
        return replace(self, trainer_kwargs=kwargs, given=tuple(sorted(marks)), **values)

    def lines(self) -> list[str]:
        """A short printout: what the run gets from the preset, its source, the conversions (``note:``)
        and each rl-zoo setting not applied (``not applied:``)."""
        g = set(self.given)

        def mark(name: str, text: str) -> str:
            return f"{text} (given)" if name in g else text

        kw = self.trainer_kwargs
        lr = kw.get("lr", kw.get("actor_lr"))
        hidden = "-".join(str(h) for h in self.hidden) if self.hidden else "default"
        label = "rl-zoo" if self.source.startswith("rl-baselines3-zoo") else "file"
        lr_text = "" if lr is None else f"lr {_fmt(lr)}"
        if lr_text and {"trainer_kwargs.lr", "trainer_kwargs.actor_lr"} & g:
            lr_text += " (given)"
        head = [lr_text, mark("batch_size", f"batch {self.batch_size}"), mark("capacity", f"buffer {self.capacity}"),
                mark("learning_starts", f"learning starts {self.learning_starts}"),
                mark("replay_ratio", f"replay ratio {_fmt(self.replay_ratio)}"),
                mark("train_every", f"train every {self.train_every}"), mark("hidden", f"hidden {hidden}"),
                mark("max_env_steps", f"budget {self.max_env_steps} env steps")]
        status = f" [{self.status}]" if self.status else ""
        out = [f"preset {label} {self.algo} {self.env_id}{status}: " + ", ".join(h for h in head if h)]
        shown = {"lr", "actor_lr", "hidden_sizes", "actor_hidden", "critic_hidden"}
        same_lr = {k for k in ("critic_lr", "alpha_lr") if kw.get(k) == lr}
        rest = [f"{k} {_fmt(v)}" + (" (given)" if f"trainer_kwargs.{k}" in g else "")
                for k, v in kw.items() if (k not in shown and k not in same_lr) or f"trainer_kwargs.{k}" in g]
        extra = [mark("random_steps", f"random_steps {self.random_steps}"),
                 mark("replay_kind", f"replay {self.replay_kind}")]
        if self.n_step != 1 or "n_step" in g:
            extra.append(mark("n_step", f"n_step {self.n_step}"))
        if self.env_wrappers:
            extra.append(mark("env_wrappers", "env wrappers " + "+".join(self.env_wrappers)))
        out.append(f"  {self.trainer.rsplit(':', 1)[-1] or self.algo.upper()}: " + ", ".join(rest + extra))
        out.append(f"  from {self.source}")
        out.extend(f"  note: {n}" for n in self.notes)
        out.extend(f"  not applied: {n}" for n in self.not_applied)
        return out


def _check_int(values: dict[str, Any], name: str, low: int) -> None:
    if name in values:
        v = values[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise SpecError(f"Preset.override: {name} = {v!r}; expected an int >= {low}. Fix: e.g. {name}=1000.")


def _fmt(value: Any) -> str:
    """``2.3e-3`` for small floats, ``0.99``, ``100000``, lists as ``[256, 256]``."""
    if isinstance(value, float):
        if value != 0 and abs(value) < 1e-2:
            mant, exp = f"{value:.3e}".split("e")
            return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"
        return f"{value:g}"
    return str(value) if not isinstance(value, str) else repr(value)


# --------------------------------------------------------------------------- data

@functools.cache
def _packaged(algo: str) -> dict[str, Any]:
    """The parsed, checked data file of ``algo`` (cached; callers copy what they hand out)."""
    name = f"{algo}.toml"
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return _parse(text, f"packaged preset file pearl_core/presets/{name}", algo)


def _parse(text: str, where: str, algo: str | None = None) -> dict[str, Any]:
    """TOML text -> the checked document (``algo`` given: the file must be for it)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where} is not valid TOML ({exc}); expected TOML 1.0 in pearl_core/presets' format. Fix: "
                        'correct the syntax there (e.g. key = "value"; '
                        'tables as [presets."CartPole-v1".rlzoo]).') from exc
    for key in doc:
        if key not in _TOP_KEYS:
            raise SpecError(f"{where}: top-level key {key!r} is unknown; expected only {list(_TOP_KEYS)}, found "
                            f"{sorted(doc)}. Fix: put rl-zoo entries under [presets.\"<env id>\".rlzoo].")
    source = doc.get("source")
    found = source.get("algo") if isinstance(source, dict) else None
    if not isinstance(found, str) or found.lower() not in ALGOS:
        raise SpecError(f"{where}: [source] algo is {found!r}; expected one of {list(ALGOS)}. Fix: add "
                        '[source] with algo = "dqn" (or ddpg, td3, sac) at the top of the file.')
    if algo is not None and found.lower() != algo:
        raise SpecError(f"{where}: [source] algo = {found!r}; expected {algo!r}. Fix: correct [source] algo.")
    defaults = doc.get("sb3_defaults", {})
    presets = doc.get("presets")
    if not isinstance(defaults, dict):
        raise SpecError(f"{where}: sb3_defaults is {defaults!r:.60}; expected a table of SB3 keys. Fix: write "
                        "[sb3_defaults] with key = value lines, or leave it out.")
    if not isinstance(presets, dict) or not presets:
        raise SpecError(f"{where}: no [presets.\"<env id>\".rlzoo] table found; expected at least one entry. Fix: "
                        'add e.g. [presets."CartPole-v1".rlzoo] with n_timesteps = 5e4 and the other rl-zoo keys.')
    for key, entry in presets.items():
        at = f'{where}, [presets."{key}"]'
        if not isinstance(entry, dict) or not isinstance(entry.get("rlzoo"), dict):
            raise SpecError(f"{at}: expected a table with an rlzoo sub-table of rl-zoo keys, found "
                            f"{entry!r:.80}. Fix: write the entry as [presets.\"{key}\".rlzoo] with key = value lines.")
        for k in entry:
            if k not in _ENTRY_KEYS:
                raise SpecError(f"{at}: key {k!r} is unknown; expected some of {list(_ENTRY_KEYS)}. Fix: rl-zoo "
                                f'keys go in [presets."{key}".rlzoo], '
                                f'PEARL keywords in [presets."{key}".trainer_kwargs].')
        match = entry.get("match", [])
        if not isinstance(match, list) or not all(isinstance(m, str) for m in match):
            raise SpecError(f"{at}: match = {match!r}; expected a list of id patterns. Fix: e.g. "
                            'match = ["ALE/*-v5"].')
        for k in ("status", "merged_from"):
            if not isinstance(entry.get(k, ""), str):
                raise SpecError(f"{at}: {k} = {entry[k]!r}; expected a string. Fix: quote it.")
    return doc


def _lookup(presets: Mapping[str, Any], env_id: str) -> str | None:
    """The entry for ``env_id``: the exact id, else the first entry whose ``match`` patterns cover it."""
    if env_id in presets:
        return env_id
    for key, entry in presets.items():
        if any(fnmatch.fnmatchcase(env_id, p) for p in entry.get("match", ())):
            return key
    return None


def _source_text(doc: Mapping[str, Any], key: str, where: str | None) -> str:
    src = doc.get("source", {})
    repo = str(src.get("repository", "")).removeprefix("https://github.com/DLR-RM/")
    parts = [p for p in (repo, src.get("file"), f"@ {str(src['commit'])[:7]}" if src.get("commit") else "") if p]
    text = " ".join(str(p) for p in parts)
    if src.get("sb3_version"):
        text += f" on stable-baselines3 {src['sb3_version']} defaults"
    if where is not None:
        text = f"{where}" + (f" ({text})" if text else "")
    return f"{text}, entry {key!r}"


def _build(doc: Mapping[str, Any], key: str, env_id: str, where: str | None, label: str) -> Preset:
    algo = str(doc["source"]["algo"]).lower()
    entry = doc["presets"][key]
    defaults = dict(_packaged(algo)["sb3_defaults"]) if where is not None else {}
    defaults.update(doc.get("sb3_defaults", {}))
    raw = copy.deepcopy(entry["rlzoo"])
    mapped = map_entry(algo, raw, defaults, f'{label}, [presets."{key}".rlzoo]')
    extra = entry.get("trainer_kwargs")
    if extra is not None:
        mapped["trainer_kwargs"].update(
            _check_trainer_kwargs(algo, extra, f'{label}, [presets."{key}".trainer_kwargs]'))
    return Preset(algo=algo, env_id=env_id, source=_source_text(doc, key, where), trainer=TRAINERS[algo], entry=key,
                  status=entry.get("status", ""), rlzoo=raw, **mapped)


def _check_trainer_kwargs(algo: str, extra: Any, where: str) -> dict[str, Any]:
    """A user's PEARL keywords, checked against the built-in trainer's constructor."""
    from pearl_core import algorithms

    cls = getattr(algorithms, TRAINERS[algo].rsplit(":", 1)[1])
    params = [p for p in inspect.signature(cls).parameters if p not in ("observation_space", "action_space")]
    if not isinstance(extra, dict):
        raise SpecError(f"{where}: expected a table of {cls.__name__} keywords, found {extra!r:.60}. Fix: write "
                        "key = value lines under it.")
    for k in extra:
        if k not in params:
            close = difflib.get_close_matches(k, params, n=1)
            raise SpecError(f"{where}: {k!r} is not a keyword of {cls.__name__}; expected one of {params}. Fix: "
                            + (f"did you mean {close[0]!r}?" if close else f"remove {k!r}."))
    return dict(extra)


# --------------------------------------------------------------------------- API

def _algo(algo: str) -> str | None:
    return algo.lower() if isinstance(algo, str) and algo.lower() in ALGOS else None


def find_preset(algo: str, env_id: str) -> Preset | None:
    """rl-zoo's preset of ``algo`` (any case: dqn, ddpg, td3, sac) for ``env_id``; ``None`` when there is none.

    The id is looked up exactly, then against the entries' ``match`` patterns (DQN's ``atari`` entry covers
    ``*NoFrameskip-v4`` and ``ALE/*-v5``). An algorithm without presets gives ``None`` too.
    """
    name = _algo(algo)
    if name is None or not isinstance(env_id, str):
        return None
    doc = _packaged(name)
    key = _lookup(doc["presets"], env_id)
    if key is None:
        return None
    return _build(doc, key, env_id, None, f"packaged preset file pearl_core/presets/{name}.toml")


def preset_envs(algo: str) -> tuple[str, ...]:
    """The entries ``algo`` has presets for (env ids, and ``"atari"`` with its patterns in parentheses)."""
    name = _algo(algo)
    if name is None:
        return ()
    presets = _packaged(name)["presets"]
    return tuple(k + (f" ({', '.join(e['match'])})" if e.get("match") else "") for k, e in presets.items())


def no_preset_note(algo: str, env_id: str) -> str:
    """The note to print when :func:`find_preset` gives ``None``: why, what is near, and what to do."""
    name = _algo(algo)
    if name is None:
        return (f"no preset for {algo!r}: rl-zoo presets exist for {', '.join(ALGOS)} only; the trainer's own "
                "defaults apply. Fix: pass --preset FILE or set the hyper-parameters yourself.")
    keys = list(_packaged(name)["presets"])
    base = env_id.rsplit("-v", 1)[0] if isinstance(env_id, str) else ""
    near = [k for k in keys if k.rsplit("-v", 1)[0] == base] or difflib.get_close_matches(str(env_id), keys, n=2)
    hint = f" (rl-zoo has one for {', '.join(near)})" if near else ""
    return (f"no rl-zoo {name} preset for {env_id}{hint}; PEARL's built-in {name.upper()} defaults apply, which "
            "were tuned for one env (see pearl_core/algorithms). Fix: pass --preset FILE (a TOML file in "
            "pearl_core/presets' format) or set the hyper-parameters yourself.")


def load_preset_file(path: str | Path, env_id: str | None = None) -> Preset:
    """A user's preset file (the packaged files' format, see the module docstring) as a :class:`Preset`.

    With one entry, that entry (``env_id`` given: it must match it); with several, the one for ``env_id``.
    Raises :class:`SpecError` naming the file, the key, what was expected and found, and the fix.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"preset file {str(p)!r} cannot be read ({exc}). Fix: give the path of a TOML preset "
                        "file (see pearl_core/presets/dqn.toml for the format).") from exc
    where = f"preset file {str(p)!r}"
    doc = _parse(text, where)
    keys = list(doc["presets"])
    if env_id is None:
        if len(keys) != 1:
            raise SpecError(f"{where} holds {len(keys)} entries ({keys}); expected one, or an env id to choose "
                            "by. Fix: pass the env id (load_preset_file(path, env_id)), or keep one entry.")
        key, env_id = keys[0], keys[0]
    else:
        found = _lookup(doc["presets"], env_id)
        if found is None:
            raise SpecError(f"{where} has no entry for {env_id!r}; expected one of {keys} (or a match pattern "
                            f'covering it). Fix: add [presets."{env_id}".rlzoo] to the file.')
        key = found
    return _build(doc, key, env_id, where, where)

