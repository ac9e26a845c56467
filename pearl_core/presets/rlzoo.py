"""rl-baselines3-zoo keys onto PEARL's trainers and run settings (the mapping behind :mod:`pearl_core.presets`).

rl-zoo passes an entry's keys to a stable-baselines3 (SB3) constructor, so a key the entry leaves out
takes SB3's default; :func:`map_entry` therefore maps ``{**sb3_defaults, **entry}`` and writes every
hyper-parameter SB3 fixes explicitly into the trainer's keywords (PEARL's own trainer defaults, tuned
for one env each, never leak into a preset). What maps, and how:

==============================  ==============================================================
rl-zoo / SB3                    PEARL
==============================  ==============================================================
n_timesteps                     ``max_env_steps`` (and DQN's ``total_env_steps``)
learning_rate (or ``lin_X``)    ``lr`` (DQN); ``actor_lr``/``critic_lr`` (+ ``alpha_lr`` SAC):
                                ``lin_X`` decays X to 0 in SB3; PEARL keeps X constant (noted)
buffer_size, batch_size         ``capacity``, ``batch_size``; replay ``"uniform"`` (SB3's buffer)
learning_starts                 ``learning_starts`` and ``random_steps`` (SB3 acts uniformly at
                                random until then)
train_freq F, gradient_steps G  ``train_every = F * n_envs``, ``replay_ratio = G / (F * n_envs)``;
                                G = -1 is "as many updates as env steps" (SB3), ratio 1
gamma, tau                      ``gamma``, ``tau``
policy_kwargs net_arch          ``hidden`` (``hidden_sizes`` / ``actor_hidden`` + ``critic_hidden``)
DQN target_update_interval I    ``target_update_every`` in learner updates: SB3 counts I in env
                                steps during collection, so with I <= F the target is refreshed
                                before every burst of G updates (``G``), else every ``I * ratio``
DQN exploration_*               ``eps_start``, ``eps_final``, ``eps_fraction`` (of
                                ``total_env_steps = n_timesteps``, as SB3's fraction of the run)
DQN max_grad_norm               ``max_grad_norm`` (SB3's Huber loss: ``huber_delta=1``, no double
                                DQN, no dueling, written explicitly)
DDPG/TD3 noise_type, noise_std  ``noise_std`` (both add it to the action scaled to [-1, 1] and
                                clip); Ornstein-Uhlenbeck is applied as Gaussian (noted)
TD3 policy_delay, target_*      ``policy_delay``, ``target_noise``, ``target_noise_clip``
SAC ent_coef, target_entropy    ``ent_coef`` (``"auto"`` or a number), ``target_entropy``
                                (``"auto"`` is ``None``: ``-|A|`` as SB3)
n_steps                         ``n_step`` (the replay's n-step returns, ``ReplayConfig.n_step``)
atari env_wrapper, frame_stack  ``env_wrappers=("atari",)``: PEARL's ``"atari"`` env preset does
                                what SB3's AtariWrapper and a 4-frame stack do
==============================  ==============================================================

Everything else (``normalize``, ``use_sde``, ``n_envs``, other wrappers, ``log_std_init``, ...) is
named in ``not_applied`` with the reason. ``policy_kwargs`` is rl-zoo's string ``"dict(net_arch=[...])"``;
it is read with :func:`parse_policy_kwargs`, a literal parser built on :mod:`ast` (never ``eval``).
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Mapping
from typing import Any

from pearl_core.errors import SpecError

__all__ = ["ALGOS", "TRAINERS", "hidden_keywords", "map_entry", "parse_policy_kwargs"]

#: The algorithms rl-zoo publishes presets for that PEARL has built-in trainers for.
ALGOS = ("dqn", "ddpg", "td3", "sac")
#: Import path of each built-in trainer (``RunConfig.trainer``).
TRAINERS = {"dqn": "pearl_core.algorithms:DQN", "ddpg": "pearl_core.algorithms:DDPG",
            "td3": "pearl_core.algorithms:TD3", "sac": "pearl_core.algorithms:SAC"}

_COMMON = {"n_timesteps", "policy", "learning_rate", "buffer_size", "learning_starts", "batch_size", "tau",
           "gamma", "train_freq", "gradient_steps", "policy_kwargs", "n_envs", "normalize", "env_wrapper",
           "frame_stack", "optimize_memory_usage", "replay_buffer_class", "replay_buffer_kwargs", "n_steps",
           "callback", "env_kwargs", "vec_env_wrapper", "monitor_kwargs", "net_arch"}
_NOISE = {"noise_type", "noise_std"}
#: rl-zoo / SB3 keys each algorithm takes (``net_arch`` only in ``[sb3_defaults]``: the policy's default).
KEYS: dict[str, frozenset[str]] = {
    "dqn": frozenset(_COMMON | {"target_update_interval", "exploration_fraction", "exploration_initial_eps",
                                "exploration_final_eps", "max_grad_norm"}),
    "ddpg": frozenset(_COMMON | _NOISE),
    "td3": frozenset(_COMMON | _NOISE | {"policy_delay", "target_policy_noise", "target_noise_clip"}),
    "sac": frozenset(_COMMON | _NOISE | {"ent_coef", "target_update_interval", "target_entropy", "use_sde",
                                         "sde_sample_freq", "use_sde_at_warmup"}),
}
ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
#: Features of SB3's NatureCNN (its last layer), the first hidden layer of PEARL's Nature-DQN head.
NATURE_FEATURES = 512


def hidden_keywords(algo: str, sizes: tuple[int, ...]) -> dict[str, list[int]]:
    """The trainer keywords for hidden sizes (as :func:`pearl_core.algorithms.hidden_kwargs`, without torch)."""
    if algo == "dqn":
        return {"hidden_sizes": list(sizes)}
    return {"actor_hidden": list(sizes), "critic_hidden": list(sizes)}


def _kind(value: Any) -> str:
    return {bool: "a bool", int: "an int", float: "a float", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


class _Entry:
    """One entry being mapped: its values, where it came from (for messages) and what it collects."""

    def __init__(self, algo: str, values: Mapping[str, Any], where: str, raw_keys: set[str]):
        self.algo, self.values, self.where, self.raw_keys = algo, values, where, raw_keys
        self.not_applied: list[str] = []
        self.notes: list[str] = []

    def bad(self, key: str, expected: str, fix: str) -> SpecError:
        value = self.values.get(key)
        found = "nothing" if key not in self.values else f"{value!r} ({_kind(value)})"
        return SpecError(f"{self.where}: rl-zoo key {key!r} is invalid; expected {expected}, found {found}. "
                         f"Fix: {fix}.")

    def skip(self, key: str, why: str) -> None:
        self.not_applied.append(f"{key} = {self.values[key]!r}: {why}")

    def has(self, key: str) -> bool:
        return key in self.values

    def count(self, key: str, low: int = 0, fix: str = "") -> int:
        v = self.values.get(key)
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self.bad(key, f"an integer >= {low}", fix or f"e.g. {key} = {max(low, 1) * 1000}")
        return v

    def number(self, key: str, low: float = 0.0, high: float = math.inf, open_low: bool = False) -> float:
        v = self.values.get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not isinstance(v, (int, float)) or not ok or (v <= low if open_low else v < low) or v > high:
            rng = f"{'(' if open_low else '['}{low:g}, {high:g}]"
            raise self.bad(key, f"a number in {rng}", f"write a number, e.g. {key} = {min(max(low, 0.1), high):g}")
        return float(v)

    def string(self, key: str, choices: tuple[str, ...]) -> str:
        v = self.values.get(key)
        if not isinstance(v, str) or (choices and v not in choices):
            raise self.bad(key, "one of " + ", ".join(repr(c) for c in choices), f'e.g. {key} = "{choices[0]}"')
        return v


def _check_keys(e: _Entry, default_keys: set[str]) -> None:
    known = KEYS[e.algo]
    for key in sorted(e.raw_keys) + sorted(default_keys):
        if key in known and (key != "net_arch" or key not in e.raw_keys):
            continue
        others = [a for a in ALGOS if key in KEYS[a] and a != e.algo]
        if others:
            expected = f"a {e.algo} key (this one is a {'/'.join(others)} key, not one SB3's {e.algo} takes)"
            fix = f"remove {key!r}"
        elif key == "net_arch":
            expected = "net_arch inside policy_kwargs, as rl-zoo writes it"
            fix = 'write policy_kwargs = "dict(net_arch=[256, 256])"'
        else:
            close = difflib.get_close_matches(key, sorted(known - {"net_arch"}), n=1)
            expected = f"one of rl-zoo's {e.algo} keys ({', '.join(sorted(known - {'net_arch'}))})"
            fix = f"did you mean {close[0]!r}?" if close else f"remove {key!r} or correct its name"
        raise e.bad(key, expected, fix)


def parse_policy_kwargs(text: str) -> dict[str, Any]:
    """rl-zoo's ``policy_kwargs`` string, e.g. ``"dict(log_std_init=-3, net_arch=[400, 300])"``, as a dict.

    Only ``dict(...)`` calls with keyword arguments, literals (numbers, strings, lists, tuples, ``True``...),
    nested ``dict(...)`` and dotted names (``nn.ReLU``, kept as the string ``"nn.ReLU"``) are accepted;
    nothing is evaluated. Raises :class:`ValueError` for anything else.
    """

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Call):
            return call(node)
        if isinstance(node, (ast.Name, ast.Attribute)):
            return ast.unparse(node)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(x) for x in node.elts]
        if isinstance(node, ast.Dict):
            return {ast.literal_eval(k): value(v) for k, v in zip(node.keys, node.values) if k is not None}
        return ast.literal_eval(node)

    def call(node: ast.Call) -> dict[str, Any]:
        if (not (isinstance(node.func, ast.Name) and node.func.id == "dict") or node.args
                or any(kw.arg is None for kw in node.keywords)):
            raise ValueError(f"expected dict(key=value, ...), found {ast.unparse(node)!r}")
        return {str(kw.arg): value(kw.value) for kw in node.keywords}

    body = ast.parse(text.strip(), mode="eval").body
    if isinstance(body, ast.Call):
        return call(body)
    raise ValueError(f"expected dict(key=value, ...), found {text!r}")


def _sizes(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value):
        return tuple(value)
    return None


def _network(e: _Entry, kwargs: dict[str, Any]) -> tuple[int, ...]:
    """``policy``, ``policy_kwargs`` and the default ``net_arch`` -> hidden sizes (into ``kwargs``)."""
    policy = e.string("policy", ("MlpPolicy", "CnnPolicy", "MultiInputPolicy")) if e.has("policy") else "MlpPolicy"
    raw = e.values.get("policy_kwargs", {})
    if isinstance(raw, str):
        try:
            pk = parse_policy_kwargs(raw)
        except (SyntaxError, ValueError) as exc:
            raise e.bad("policy_kwargs", 'rl-zoo\'s "dict(key=value, ...)" of literals', "write it as rl-zoo does, "
                        f'e.g. policy_kwargs = "dict(net_arch=[256, 256])" ({exc})') from exc
    elif isinstance(raw, dict):
        pk = dict(raw)
    else:
        raise e.bad("policy_kwargs", 'a "dict(...)" string or a table', 'policy_kwargs = "dict(net_arch=[256, 256])"')
    cnn = policy == "CnnPolicy"
    arch = pk.pop("net_arch", None)
    if arch is None:  # the policy's default: SB3's DQN CnnPolicy has none after NatureCNN
        arch = [] if cnn and e.algo == "dqn" else e.values.get("net_arch")
    actor = critic = _sizes(arch)
    if isinstance(arch, dict) and e.algo != "dqn":
        actor, critic = _sizes(arch.get("pi")), _sizes(arch.get("qf"))
    if cnn and e.algo == "dqn":
        # SB3: NatureCNN ends in a 512-unit ReLU layer, then net_arch; PEARL's head after the conv stack is
        # hidden_sizes, so the 512 layer is its first hidden layer.
        actor = critic = None if actor is None else (NATURE_FEATURES, *actor)
    if not actor or not critic:
        raise e.bad("policy_kwargs", "net_arch as a list of layer sizes >= 1 (or dict(pi=[...], qf=[...]) for "
                    "actor-critics)", 'e.g. policy_kwargs = "dict(net_arch=[256, 256])"')
    if e.algo == "dqn":
        kwargs["encoder"] = "cnn" if cnn else "mlp"
    elif cnn:
        e.skip("policy", "PEARL's DDPG/TD3/SAC flatten observations into MLPs (no convolutional encoder)")
    if policy == "MultiInputPolicy":
        e.skip("policy", "PEARL's built-in trainers take Box observations (an MLP, or a CNN for DQN on images), "
                         "not Dict observations")
    if e.algo == "dqn":
        kwargs["hidden_sizes"] = list(actor)
    else:
        kwargs["actor_hidden"], kwargs["critic_hidden"] = list(actor), list(critic)
        if actor != critic:
            e.notes.append(f"net_arch: actor {list(actor)}, critics {list(critic)}")
    act = pk.pop("activation_fn", None)
    if act is not None and str(act).rsplit(".", 1)[-1] != "ReLU":
        e.not_applied.append(f"policy_kwargs activation_fn = {act}: PEARL's built-in MLPs use ReLU")
    for key, val in pk.items():
        why = ("SB3 uses it for gSDE exploration only (use_sde); PEARL's SAC has no gSDE and learns its log-std "
               "as an output of the actor" if key == "log_std_init"
               else "PEARL's built-in networks have no such option")
        e.not_applied.append(f"policy_kwargs {key} = {val!r}: {why}")
    return actor


def _learning_rate(e: _Entry) -> float:
    v = e.values.get("learning_rate")
    if isinstance(v, str) and v.startswith("lin_"):
        try:
            lr = float(v[4:])
        except ValueError:
            lr = math.nan
        if not (math.isfinite(lr) and lr > 0):
            raise e.bad("learning_rate", 'a number > 0 or rl-zoo\'s linear schedule "lin_<number>"',
                        'e.g. learning_rate = "lin_7.3e-4" or 7.3e-4')
        e.skip("learning_rate", f"rl-zoo decays it linearly from {v[4:]} to 0 over the run; PEARL's trainers "
                                f"keep a constant learning rate, so {v[4:]} is used throughout")
        return lr
    if isinstance(v, str):
        raise e.bad("learning_rate", 'a number > 0 or rl-zoo\'s linear schedule "lin_<number>"', "e.g. 1e-3")
    return e.number("learning_rate", open_low=True)


def _schedule(e: _Entry, n_envs: int) -> tuple[int, float, bool]:
    """``train_freq``/``gradient_steps``/``n_envs`` -> ``(train_every, replay_ratio, per_episode)``."""
    freq = e.values.get("train_freq")
    per_episode = False
    if isinstance(freq, list) and len(freq) == 2 and isinstance(freq[1], str):
        if freq[1] not in ("step", "episode"):
            raise e.bad("train_freq", 'an int, or [n, "step"] / [n, "episode"]', 'e.g. train_freq = [1, "episode"]')
        per_episode = freq[1] == "episode"
        e.values = {**e.values, "train_freq": freq[0]}
    steps = e.count("train_freq", 1, "e.g. train_freq = 1 (train after every env step)")
    grad = e.count("gradient_steps", -1, "e.g. gradient_steps = 1, or -1 for as many as env steps collected")
    if grad == 0:
        raise e.bad("gradient_steps", "-1 or an integer >= 1 (0 never trains)", "e.g. gradient_steps = 1")
    if per_episode:
        if grad != -1:
            raise e.bad("gradient_steps", "-1 with train_freq in episodes (PEARL cannot tell how many env steps an "
                        "episode has)", 'write train_freq in steps, e.g. train_freq = 1000 for 1000-step episodes')
        e.not_applied.append(f"train_freq = [{steps}, 'episode']: PEARL trains every train_every env steps, not at "
                             "episode ends; mapped to one update per env step (gradient_steps = -1), train_every = 1")
        return 1, 1.0, True
    every = steps * n_envs
    return every, (every if grad == -1 else grad) / every, False


def _dqn(e: _Entry, kw: dict[str, Any], every: int, ratio: float, per_episode: bool, budget: int) -> None:
    interval = e.count("target_update_interval", 1, "e.g. target_update_interval = 1000 (env steps)")
    burst = every * ratio
    updates = burst if (interval <= every and not per_episode) else interval * ratio
    kw["target_update_every"] = max(1, round(updates))
    e.notes.append(f"target_update_interval {interval} env steps -> target_update_every {kw['target_update_every']} "
                   "learner updates" + (" (SB3 refreshes the target during collection, so each burst starts "
                                        "from a fresh copy)" if interval <= every and not per_episode else ""))
    kw["tau"] = e.number("tau", 0.0, 1.0, open_low=True)
    kw["eps_start"] = e.number("exploration_initial_eps", 0.0, 1.0)
    kw["eps_final"] = e.number("exploration_final_eps", 0.0, 1.0)
    kw["eps_fraction"] = e.number("exploration_fraction", 0.0, 1.0)
    kw["total_env_steps"] = budget
    kw["max_grad_norm"] = e.number("max_grad_norm", open_low=True)
    kw.update(huber_delta=1.0, double_dqn=False, dueling=False)


def _noise(e: _Entry, kw: dict[str, Any]) -> None:
    if not e.has("noise_type"):
        if e.has("noise_std"):
            raise e.bad("noise_type", "'normal' or 'ornstein-uhlenbeck' with noise_std", 'add noise_type = "normal"')
        kw["noise_std"] = 0.0
        e.notes.append("no noise_type: SB3 adds no action noise, so noise_std = 0")
        return
    kind = e.string("noise_type", ("normal", "ornstein-uhlenbeck"))
    if not e.has("noise_std"):
        raise e.bad("noise_std", "a number >= 0 with noise_type", "e.g. noise_std = 0.1")
    kw["noise_std"] = e.number("noise_std", 0.0, 10.0)
    if kind == "ornstein-uhlenbeck":
        e.skip("noise_type", f"PEARL's DDPG/TD3 explore with Gaussian noise; it is applied as Gaussian noise of "
                             f"the same std {kw['noise_std']:g} (no temporal correlation)")


def _sac(e: _Entry, kw: dict[str, Any]) -> bool:
    """SAC's keys; returns whether exploration at warm-up uses the policy (gSDE at warm-up)."""
    coef = e.values.get("ent_coef")
    if isinstance(coef, str) and coef.startswith("auto"):
        init = coef[5:] if coef.startswith("auto_") else ""
        if coef != "auto" and not init:
            raise e.bad("ent_coef", "'auto', 'auto_<initial value>' or a number > 0", 'e.g. ent_coef = "auto"')
        kw["ent_coef"] = "auto"
        if init:
            e.skip("ent_coef", f"alpha is learnt ('auto') but PEARL's SAC starts it at 1, not {init}")
    else:
        kw["ent_coef"] = e.number("ent_coef", open_low=True)
    target = e.values.get("target_entropy")
    kw["target_entropy"] = None if target == "auto" else e.number("target_entropy", -math.inf)
    if e.count("target_update_interval", 1) != 1:
        e.skip("target_update_interval", "PEARL's SAC moves its target critics after every update")
    sde = e.values.get("use_sde")
    if not isinstance(sde, bool):
        raise e.bad("use_sde", "true or false", "use_sde = false")
    if sde:
        e.skip("use_sde", "PEARL's SAC has no generalized state-dependent exploration (gSDE); it explores with its "
                          "Gaussian policy, noise drawn anew every step")
        for key in ("sde_sample_freq", "use_sde_at_warmup"):
            if key in e.raw_keys:
                e.skip(key, "belongs to gSDE (use_sde), which PEARL's SAC does not have")
    if e.has("noise_type") or e.has("noise_std"):
        e.not_applied.append("noise_type/noise_std: PEARL's SAC adds no action noise to its sampled actions")
    return bool(sde and e.values.get("use_sde_at_warmup") is True)


def _env_side(e: _Entry) -> tuple[str, ...] | None:
    """``env_wrapper``/``frame_stack`` and the keys with no PEARL equivalent; returns ``env_wrappers``."""
    wrappers: tuple[str, ...] | None = None
    raw = e.values.get("env_wrapper")
    items = raw if isinstance(raw, list) else ([] if raw is None else [raw])
    names = [next(iter(w)) if isinstance(w, dict) and len(w) == 1 else w for w in items]
    if any(not isinstance(n, str) for n in names):
        raise e.bad("env_wrapper", "a wrapper import path or a list of them", f'e.g. env_wrapper = ["{ATARI_WRAPPER}"]')
    if ATARI_WRAPPER in names:
        wrappers = ("atari",)
        e.notes.append("env_wrapper AtariWrapper: applied as PEARL's 'atari' env preset (30 no-ops, frame skip 4 "
                       "with max-pool, 84x84 grey, episodic life and clipped rewards for training, FIRE on reset; "
                       "ALE/*-v5 ids keep ALE's sticky actions, p = 0.25, *NoFrameskip-v4 ids have none)")
        if isinstance(items[names.index(ATARI_WRAPPER)], dict):
            e.not_applied.append("env_wrapper AtariWrapper keyword arguments: PEARL's 'atari' preset has fixed "
                                 "settings")
    others = [n for n in names if n != ATARI_WRAPPER]
    if others:
        e.not_applied.append(f"env_wrapper {others}: PEARL applies env wrappers by its own presets or import paths "
                             "(RunConfig.env_wrappers); rl-zoo's are not applied")
    if e.has("frame_stack"):
        if wrappers == ("atari",) and e.values["frame_stack"] == 4:
            e.notes.append("frame_stack 4: PEARL's 'atari' env preset stacks the last 4 frames")
        else:
            e.skip("frame_stack", "PEARL stacks frames only in its 'atari' env preset (4 frames)")
    if e.values.get("normalize"):
        e.skip("normalize", "PEARL has no VecNormalize: observations and rewards reach the trainer unnormalised")
    if e.values.get("optimize_memory_usage"):
        e.skip("optimize_memory_usage", "PEARL's replay storage has its own layout (image frames stay uint8)")
    for key, why in (("replay_buffer_class", "PEARL's replay is uniform or prioritized (ReplayConfig.kind)"),
                     ("replay_buffer_kwargs", "PEARL's replay takes its settings from ReplayConfig"),
                     ("callback", "rl-zoo training callbacks do not exist in PEARL"),
                     ("env_kwargs", "pass them as RunConfig.env_kwargs"),
                     ("vec_env_wrapper", "PEARL's actors do their own vectorisation"),
                     ("monitor_kwargs", "PEARL logs episodes itself")):
        if e.has(key):
            e.skip(key, why)
    return wrappers


def map_entry(algo: str, raw: Mapping[str, Any], sb3_defaults: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One rl-zoo entry on top of SB3's defaults -> the mapped fields of a :class:`~pearl_core.presets.Preset`.

    Returns ``trainer_kwargs``, ``batch_size``, ``capacity``, ``learning_starts``, ``random_steps``,
    ``replay_ratio``, ``train_every``, ``max_env_steps``, ``n_step``, ``hidden``, ``env_wrappers``, ``not_applied``
    and ``notes``. ``where`` names the entry in error messages. Raises :class:`SpecError` for a key the
    algorithm does not take or a value of the wrong kind.
    """
    e = _Entry(algo, {**sb3_defaults, **raw}, where, set(raw))
    _check_keys(e, set(sb3_defaults))
    if "n_timesteps" not in raw:
        raise e.bad("n_timesteps", "the run's budget in env steps, as every rl-zoo entry gives it",
                    "e.g. n_timesteps = 1e6")
    budget = e.count("n_timesteps", 1, "e.g. n_timesteps = 1e6")
    n_envs = e.count("n_envs", 1) if e.has("n_envs") else 1
    if n_envs != 1:
        e.skip("n_envs", "the number of environments is the run's (actors x envs per actor); train_every and "
                         "replay_ratio here count the steps of all of rl-zoo's environments")
    every, ratio, per_episode = _schedule(e, n_envs)
    kw: dict[str, Any] = {}
    hidden = _network(e, kw)
    lr = _learning_rate(e)
    kw["gamma"] = e.number("gamma", 0.0, 1.0)
    warmup_policy = False
    if algo == "dqn":
        kw["lr"] = lr
        _dqn(e, kw, every, ratio, per_episode, budget)
    else:
        kw["actor_lr"] = kw["critic_lr"] = lr
        kw["tau"] = e.number("tau", 0.0, 1.0, open_low=True)
        kw["max_grad_norm"] = None
        if algo == "sac":
            kw["alpha_lr"] = lr
            warmup_policy = _sac(e, kw)
        else:
            _noise(e, kw)
            if algo == "td3":
                kw["policy_delay"] = e.count("policy_delay", 1)
                kw["target_noise"] = e.number("target_policy_noise", 0.0, 10.0)
                kw["target_noise_clip"] = e.number("target_noise_clip", 0.0, 10.0)
            else:
                kw["policy_delay"] = 1
    starts = e.count("learning_starts", 0)
    return {
        "trainer_kwargs": kw,
        "batch_size": e.count("batch_size", 1),
        "capacity": e.count("buffer_size", 1),
        "learning_starts": starts,
        "random_steps": 0 if warmup_policy else starts,
        "replay_ratio": ratio,
        "train_every": every,
        "max_env_steps": budget,
        "n_step": e.count("n_steps", 1) if e.has("n_steps") else 1,
        "hidden": hidden,
        "env_wrappers": _env_side(e),
        "not_applied": tuple(e.not_applied),
        "notes": tuple(e.notes),
    }
