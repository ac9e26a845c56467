"""Presets (issue 41): rl-zoo's published hyper-parameters as package data, mapped onto PEARL's trainers.

Expected values come from the raw rl-zoo tables in the shipped TOML files (never from copies of the
mapped result), so a change to the data or the mapping shows here.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from pearl_core.errors import SpecError
from pearl_core.presets import (
    ALGOS,
    OVERRIDABLE,
    Preset,
    find_preset,
    load_preset_file,
    no_preset_note,
    preset_envs,
)
from pearl_core.presets.rlzoo import TRAINERS, parse_policy_kwargs


def _data(algo: str) -> dict:
    return tomllib.loads(resources.files("pearl_core.presets").joinpath(f"{algo}.toml").read_text("utf-8"))


def _entries() -> list[tuple[str, str, str]]:
    """(algo, entry key, an env id it applies to) for every entry of every shipped file."""
    out = []
    for algo in ALGOS:
        for key, entry in _data(algo)["presets"].items():
            env_id = "ALE/Pong-v5" if entry.get("match") else key
            out.append((algo, key, env_id))
    return out


ENTRIES = _entries()


def _get(algo: str, env_id: str) -> Preset:
    p = find_preset(algo, env_id)
    assert p is not None, (algo, env_id)
    return p


def _trainer_class(algo: str) -> type:
    from pearl_core import algorithms

    return getattr(algorithms, TRAINERS[algo].rsplit(":", 1)[1])


def _family_missing(env_id: str) -> str | None:
    """Why ``env_id`` cannot be built here (a missing optional package), else None."""
    needs = {"ALE/": "ale_py", "Lunar": "Box2D", "Bipedal": "Box2D"}
    for prefix, module in needs.items():
        if prefix in env_id and importlib.util.find_spec(module) is None:
            return module
    if re.match(r"(HalfCheetah|Ant|Hopper|Walker2d|Humanoid|Swimmer)-v", env_id) and importlib.util.find_spec(
            "mujoco") is None:
        return "mujoco"
    return None


# --------------------------------------------------------------------------- the data

@pytest.mark.parametrize("algo", ALGOS)
def test_every_file_parses_and_names_its_source(algo):
    doc = _data(algo)
    src = doc["source"]
    assert src["algo"] == algo
    assert src["repository"] == "https://github.com/DLR-RM/rl-baselines3-zoo"
    assert src["file"] == f"hyperparams/{algo}.yml"
    assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]) and re.fullmatch(r"[0-9a-f]{40}", src["sb3_commit"])
    assert doc["sb3_defaults"] and doc["presets"]
    for key, entry in doc["presets"].items():
        assert isinstance(entry["rlzoo"]["n_timesteps"], (int, float)), key


def test_families_covered():
    covered = {a: set(_data(a)["presets"]) for a in ALGOS}
    assert {"atari", "CartPole-v1", "MountainCar-v0", "Acrobot-v1", "LunarLander-v3"} <= covered["dqn"]
    for algo in ("ddpg", "td3", "sac"):
        assert {"Pendulum-v1", "MountainCarContinuous-v0", "LunarLanderContinuous-v3", "BipedalWalker-v3",
                "Hopper-v4", "HalfCheetah-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4", "Swimmer-v4"} <= covered[algo]
    assert preset_envs("DQN")[0] == "atari (*NoFrameskip-v4, ALE/*-v5)"
    assert preset_envs("ppo") == ()


@pytest.mark.parametrize("algo,key,env_id", ENTRIES, ids=[f"{a}-{k}" for a, k, _ in ENTRIES])
def test_every_entry_maps(algo, key, env_id):
    from pearl_core.algorithms import hidden_kwargs
    from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria

    p = find_preset(algo, env_id)
    assert isinstance(p, Preset) and p.algo == algo and p.entry == key and p.env_id == env_id
    raw = _data(algo)["presets"][key]["rlzoo"]
    assert p.rlzoo == raw
    assert p.max_env_steps == int(raw["n_timesteps"])
    assert p.trainer == TRAINERS[algo]
    cls = _trainer_class(algo)
    params = set(inspect.signature(cls).parameters)
    assert set(p.trainer_kwargs) <= params, set(p.trainer_kwargs) - params
    assert p.hidden is not None
    expected = hidden_kwargs(cls, p.hidden)
    assert {k: list(v) for k, v in expected.items()} == {k: p.trainer_kwargs[k] for k in expected}
    assert all(isinstance(n, str) and ": " in n for n in p.not_applied)
    # The run-level settings are ones a RunConfig accepts (JSON trainer kwargs, ranges).
    RunConfig(env_id=env_id, trainer=p.trainer, trainer_kwargs=p.trainer_kwargs, batch_size=p.batch_size,
              learning_starts=p.learning_starts, random_steps=p.random_steps, replay_ratio=p.replay_ratio,
              train_every=p.train_every, env_wrappers=p.env_wrappers,
              replay=ReplayConfig(kind=p.replay_kind, capacity=p.capacity, n_step=p.n_step),
              stop=StopCriteria(max_env_steps=p.max_env_steps))
    assert p.lines()[0].startswith(f"preset rl-zoo {algo} {env_id}")


@pytest.mark.filterwarnings("ignore:.*is out of date:DeprecationWarning")  # rl-zoo's MuJoCo entries are -v4
@pytest.mark.parametrize("algo,key,env_id", ENTRIES, ids=[f"{a}-{k}" for a, k, _ in ENTRIES])
def test_trainer_constructor_accepts_the_preset(algo, key, env_id):
    """Each mapped trainer_kwargs builds the real trainer on the real env's spaces, which then acts."""
    missing = _family_missing(env_id)
    if missing:
        pytest.skip(f"{env_id} needs {missing}")
    from pearl_core.envs import env_spaces

    p = _get(algo, env_id)
    obs_space, act_space = env_spaces(env_id, wrappers=p.env_wrappers)
    trainer = _trainer_class(algo)(obs_space, act_space, seed=0, **p.trainer_kwargs)
    obs = np.stack([obs_space.sample(), obs_space.sample()])
    action = trainer.get_action(obs, True)
    assert len(action) == 2


# --------------------------------------------------------------------------- lookup

def test_cartpole_dqn_is_rlzoo_values():
    doc = _data("dqn")
    raw, defaults = doc["presets"]["CartPole-v1"]["rlzoo"], doc["sb3_defaults"]
    for name in ("dqn", "DQN", "Dqn"):
        p = find_preset(name, "CartPole-v1")
        assert p is not None
        kw = p.trainer_kwargs
        assert kw["lr"] == raw["learning_rate"]
        assert kw["gamma"] == raw["gamma"]
        assert kw["eps_final"] == raw["exploration_final_eps"]
        assert kw["eps_fraction"] == raw["exploration_fraction"]
        assert kw["eps_start"] == defaults["exploration_initial_eps"]
        assert kw["tau"] == defaults["tau"] and kw["max_grad_norm"] == defaults["max_grad_norm"]
        assert kw["total_env_steps"] == int(raw["n_timesteps"]) == p.max_env_steps
        assert p.batch_size == raw["batch_size"]
        assert p.capacity == raw["buffer_size"]
        assert p.learning_starts == p.random_steps == raw["learning_starts"]
        assert p.train_every == raw["train_freq"]
        assert p.replay_ratio == raw["gradient_steps"] / raw["train_freq"]
        assert p.hidden == tuple(parse_policy_kwargs(raw["policy_kwargs"])["net_arch"])
        # target_update_interval (10 env steps) <= train_freq: SB3 refreshes the target before each burst.
        assert raw["target_update_interval"] <= raw["train_freq"]
        assert kw["target_update_every"] == raw["gradient_steps"]
        assert p.replay_kind == "uniform" and p.not_applied == ()
        line = p.lines()[0]
        assert line.startswith("preset rl-zoo dqn CartPole-v1") and "lr 2.3e-3" in line
        assert f"batch {raw['batch_size']}" in line and f"buffer {raw['buffer_size']}" in line


def test_gradient_steps_minus_one_is_one_update_per_env_step():
    raw = _data("dqn")["presets"]["LunarLander-v3"]["rlzoo"]
    assert raw["gradient_steps"] == -1
    p = _get("dqn", "LunarLander-v3")
    assert p.replay_ratio == 1.0 and p.train_every == raw["train_freq"]
    assert p.trainer_kwargs["target_update_every"] == raw["target_update_interval"]  # interval > train_freq, ratio 1


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5", "PongNoFrameskip-v4"])
def test_atari_ids_find_the_atari_preset(env_id):
    raw = _data("dqn")["presets"]["atari"]["rlzoo"]
    p = find_preset("dqn", env_id)
    assert p is not None and p.entry == "atari" and p.env_id == env_id
    assert p.env_wrappers == ("atari",) and p.trainer_kwargs["encoder"] == "cnn"
    assert p.trainer_kwargs["lr"] == raw["learning_rate"] and p.learning_starts == raw["learning_starts"]
    assert p.replay_ratio == raw["gradient_steps"] / raw["train_freq"]
    assert p.trainer_kwargs["target_update_every"] == raw["target_update_interval"] * p.replay_ratio
    assert p.hidden == (512,)  # SB3's NatureCNN 512-unit layer, then net_arch [] (CnnPolicy)
    for algo in ("ddpg", "td3", "sac"):
        assert find_preset(algo, env_id) is None


def test_no_preset_is_none_with_a_note():
    assert find_preset("dqn", "Taxi-v3") is None
    assert find_preset("td3", "Hopper-v5") is None  # rl-zoo publishes -v4 MuJoCo entries only
    assert find_preset("ppo", "CartPole-v1") is None
    assert find_preset("dqn", "ALE/Pong-v4") is None
    note = no_preset_note("td3", "Hopper-v5")
    assert "Hopper-v4" in note and "Fix:" in note
    assert "dqn, ddpg, td3, sac" in no_preset_note("ppo", "CartPole-v1")


def test_not_applied_names_key_and_reason():
    p = _get("sac", "MountainCarContinuous-v0")
    keys = [n.split(" = ")[0] for n in p.not_applied]
    assert "use_sde" in keys and "policy_kwargs log_std_init" in keys
    assert any("gSDE" in n for n in p.not_applied)
    assert p.trainer_kwargs["ent_coef"] == _data("sac")["presets"]["MountainCarContinuous-v0"]["rlzoo"]["ent_coef"]
    lin = _get("sac", "LunarLanderContinuous-v3")
    raw_lr = lin.rlzoo["learning_rate"]
    assert raw_lr.startswith("lin_") and lin.trainer_kwargs["actor_lr"] == float(raw_lr[4:])
    assert any(n.startswith("learning_rate = 'lin_") for n in lin.not_applied)
    ou = _get("td3", "MountainCarContinuous-v0")
    assert ou.trainer_kwargs["noise_std"] == ou.rlzoo["noise_std"]
    assert any(n.startswith("noise_type = 'ornstein-uhlenbeck'") for n in ou.not_applied)
    assert any(line.startswith("  not applied: noise_type") for line in ou.lines())


def test_actor_critic_defaults_come_from_sb3_not_pearl():
    """Keys an entry leaves out take SB3's default (recorded in the data), not PEARL's trainer default."""
    for algo in ("ddpg", "td3", "sac"):
        doc = _data(algo)
        p = _get(algo, "Hopper-v4")
        assert "gamma" not in p.rlzoo and p.trainer_kwargs["gamma"] == doc["sb3_defaults"]["gamma"]
        assert p.hidden == tuple(doc["sb3_defaults"]["net_arch"])
        assert p.capacity == doc["sb3_defaults"]["buffer_size"]
    td3 = _get("td3", "Pendulum-v1")
    assert td3.trainer_kwargs["policy_delay"] == _data("td3")["sb3_defaults"]["policy_delay"]
    assert _get("ddpg", "Pendulum-v1").trainer_kwargs["policy_delay"] == 1


# --------------------------------------------------------------------------- user files

GOOD = '''
[source]
algo = "TD3"
repository = "my tuning notes"

[presets."Hopper-v5"]
status = "mine"

[presets."Hopper-v5".rlzoo]
n_timesteps = 2e5
learning_rate = "lin_3e-4"
batch_size = 100
buffer_size = 50000
learning_starts = 5000
train_freq = 8
gradient_steps = 4
noise_type = "normal"
noise_std = 0.2
policy_kwargs = "dict(net_arch=dict(pi=[64, 64], qf=[128, 128]))"

[presets."Hopper-v5".trainer_kwargs]
max_grad_norm = 5.0
'''


def test_user_file_loads(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    p = load_preset_file(path)
    assert p.algo == "td3" and p.env_id == "Hopper-v5" and p.status == "mine" and str(path) in p.source
    assert p.max_env_steps == 200_000 and p.batch_size == 100 and p.capacity == 50_000
    assert p.learning_starts == 5000 and p.train_every == 8 and p.replay_ratio == 0.5
    kw = p.trainer_kwargs
    assert kw["actor_lr"] == kw["critic_lr"] == 3e-4 and kw["noise_std"] == 0.2 and kw["max_grad_norm"] == 5.0
    assert kw["actor_hidden"] == [64, 64] and kw["critic_hidden"] == [128, 128]
    assert kw["target_noise"] == _data("td3")["sb3_defaults"]["target_policy_noise"]  # packaged SB3 defaults
    assert any(n.startswith("learning_rate") for n in p.not_applied)
    assert load_preset_file(str(path), "Hopper-v5") == p
    if _family_missing("Hopper-v5") is None:
        from pearl_core.envs import env_spaces

        _trainer_class("td3")(*env_spaces("Hopper-v5"), **kw)


def test_user_file_with_several_entries_needs_an_env_id(tmp_path):
    path = tmp_path / "two.toml"
    path.write_text('[source]\nalgo = "dqn"\n[presets."CartPole-v1".rlzoo]\nn_timesteps = 1000\n'
                    '[presets.pixels]\nmatch = ["MinAtar/*"]\n[presets.pixels.rlzoo]\nn_timesteps = 5000\n'
                    'policy = "CnnPolicy"\n')
    with pytest.raises(SpecError, match="2 entries"):
        load_preset_file(path)
    assert load_preset_file(path, "CartPole-v1").max_env_steps == 1000
    pix = load_preset_file(path, "MinAtar/Breakout-v1")
    assert pix.entry == "pixels" and pix.trainer_kwargs["encoder"] == "cnn"
    with pytest.raises(SpecError, match="no entry for 'Acrobot-v1'"):
        load_preset_file(path, "Acrobot-v1")


def _rl(body: str, algo: str = "dqn") -> str:
    return f'[source]\nalgo = "{algo}"\n[presets."CartPole-v1".rlzoo]\n{body}\n'


MALFORMED = [
    ("syntax", "[source\nalgo = 'dqn'\n", "not valid TOML", None),
    ("no algo", '[presets."CartPole-v1".rlzoo]\nn_timesteps = 1000\n', "[source] algo", "algo"),
    ("typo", _rl("n_timesteps = 1000\nlearning_rat = 1e-3"), "did you mean 'learning_rate'", "learning_rat"),
    ("type", _rl('n_timesteps = 1000\nbatch_size = "big"'), "an integer >= 1", "batch_size"),
    ("other algo's key", _rl("n_timesteps = 1000\nnoise_std = 0.1"), "ddpg/td3/sac key", "noise_std"),
    ("code in policy_kwargs", _rl("n_timesteps = 1000\npolicy_kwargs = \"dict(net_arch=__import__('os'))\""),
     "literals", "policy_kwargs"),
    ("no budget", _rl("batch_size = 32"), "n_timesteps", "n_timesteps"),
    ("bad schedule", _rl('n_timesteps = 1000\nlearning_rate = "cos_1e-3"'), "lin_<number>", "learning_rate"),
    ("unknown trainer kwarg", _rl("n_timesteps = 1000") + '[presets."CartPole-v1".trainer_kwargs]\ngama = 0.9\n',
     "did you mean 'gamma'", "gama"),
    ("no entries", '[source]\nalgo = "sac"\n', "at least one entry", None),
    ("stray top-level key", _rl("n_timesteps = 1000") + "[hyperparams]\nx = 1\n", "top-level key", "hyperparams"),
]


@pytest.mark.parametrize("name,text,phrase,key", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_user_file_raises_spec_error(tmp_path, name, text, phrase, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_preset_file(path)
    msg = str(info.value)
    assert str(path) in msg and phrase in msg and "Fix:" in msg and "expected" in msg
    if key is not None:
        assert key in msg
    if name in ("typo", "type"):
        assert "found" in msg


def test_missing_file_raises_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot be read"):
        load_preset_file(tmp_path / "nope.toml")


# --------------------------------------------------------------------------- override and printout

def test_override_keeps_given_values():
    p = _get("dqn", "CartPole-v1")
    q = p.override(batch_size=256, capacity=None, max_env_steps=20_000, hidden=[64, 64], learning_starts=500,
                   trainer_kwargs={"lr": 1e-3, "double_dqn": True})
    assert q.batch_size == 256 and q.capacity == p.capacity  # None: not given
    assert q.max_env_steps == 20_000 and q.trainer_kwargs["total_env_steps"] == 20_000  # ε keeps rl-zoo's fraction
    assert q.hidden == (64, 64) and q.trainer_kwargs["hidden_sizes"] == [64, 64]
    assert q.learning_starts == q.random_steps == 500
    assert q.trainer_kwargs["lr"] == 1e-3 and q.trainer_kwargs["double_dqn"] is True
    assert q.trainer_kwargs["gamma"] == p.trainer_kwargs["gamma"]
    assert p.batch_size == 64 and p.trainer_kwargs["lr"] == 2.3e-3  # the original is unchanged
    assert "batch 256 (given)" in q.lines()[0] and "lr 1e-3 (given)" in q.lines()[0]
    assert set(q.given) >= {"batch_size", "max_env_steps", "hidden", "trainer_kwargs.lr"}
    assert p.override() == p
    h = p.override(trainer_kwargs={"hidden_sizes": [32]})
    assert h.hidden == (32,) and h.trainer_kwargs["hidden_sizes"] == [32]
    # An explicit total_env_steps wins over the one derived from max_env_steps.
    r = p.override(max_env_steps=9_000, trainer_kwargs={"total_env_steps": 1_000})
    assert r.trainer_kwargs["total_env_steps"] == 1_000


def test_override_rejects_unknown_or_bad_values():
    p = _get("sac", "Pendulum-v1")
    with pytest.raises(SpecError, match="did you mean 'batch_size'"):
        p.override(batchsize=3)
    with pytest.raises(SpecError, match="expected an int >= 1"):
        p.override(batch_size=0)
    with pytest.raises(SpecError, match="hidden"):
        p.override(hidden=())
    with pytest.raises(SpecError, match="trainer_kwargs"):
        p.override(trainer_kwargs="gamma=0.9")
    assert set(OVERRIDABLE) <= {f.name for f in Preset.__dataclass_fields__.values()}


def test_lines_show_source_notes_and_not_applied():
    lines = _get("dqn", "ALE/Pong-v5").lines()
    assert lines[0].startswith("preset rl-zoo dqn ALE/Pong-v5: lr 1e-4, batch 32, buffer 100000")
    assert any("hyperparams/dqn.yml @ " in line for line in lines)
    assert any(line.startswith("  note: env_wrapper AtariWrapper") for line in lines)
    sac = _get("sac", "BipedalWalker-v3").lines()
    assert sac[0].startswith("preset rl-zoo sac BipedalWalker-v3 [Tuned]")
    assert sum(line.startswith("  not applied: ") for line in sac) == 2  # use_sde, log_std_init


def test_parse_policy_kwargs_reads_literals_only():
    assert parse_policy_kwargs("dict(log_std_init=-3.67, net_arch=[64, 64])") == {
        "log_std_init": -3.67, "net_arch": [64, 64]}
    assert parse_policy_kwargs("dict(net_arch=dict(pi=[64], qf=[400, 300]), activation_fn=nn.Tanh)") == {
        "net_arch": {"pi": [64], "qf": [400, 300]}, "activation_fn": "nn.Tanh"}
    for text in ("__import__('os').system('true')", "dict(a=open('x'))", "dict(**x)", "[1, 2]"):
        with pytest.raises((ValueError, SyntaxError)):
            parse_policy_kwargs(text)


def test_packaged_files_are_in_the_package_data():
    root = Path(__file__).resolve().parents[2]
    assert '"presets/*.toml"' in (root / "pyproject.toml").read_text()
    for algo in ALGOS:
        assert (root / "pearl_core" / "presets" / f"{algo}.toml").is_file()
