"""The policy API (issue 41, point 1): load a trained run, predict, evaluate, export, and its errors.

Each algorithm trains once (a tiny serial run of a few hundred env steps, final checkpoint at the end),
for the module: DQN on CartPole (MLP), DQN on CartPole with a shifted ``Discrete(2, start=10)``, a CNN DQN
on MinAtar Breakout, SAC, TD3 and DDPG on Pendulum, and a user trainer defined here (:class:`TinyQ`,
imported by the runtime as ``"test_policy:TinyQ"``: pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from pearl_core import (CheckpointNotFoundError, ExportError, InvalidValueError, NotACheckpointError, Policy,
                        SpecError, TrainerImportError, evaluate_policy, load_policy)
from pearl_core.envs import make_env
from pearl_core.runtime.checkpoint import UntrustedCheckpointError, load_checkpoint, save_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria
from pearl_core.runtime.serial import SerialRuntime
from pearl_core.trainer import Trainer, UpdateResult

from cpu_backend import needs_cpu_backend

pytestmark = needs_cpu_backend


# --------------------------------------------------------------------------------------
# A user trainer, and an environment wrapper with a Discrete start offset
# --------------------------------------------------------------------------------------
class TinyQ(Trainer):
    """A user's Q-learner: a small MLP named by ``acting_net``, ε-greedy, one SGD step per update."""

    action_kind = "discrete"
    acting_net = "net"

    def __init__(self, observation_space, action_space, *, lr: float = 1e-2, seed: int | None = None):
        self.input_shape = tuple(observation_space.shape)
        self.n_actions = int(action_space.n)
        self.net = nn.Sequential(nn.Linear(int(np.prod(self.input_shape)), 8), nn.ReLU(), nn.Linear(8, self.n_actions))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)
        self._rng = np.random.default_rng(seed)

    def _q(self, obs) -> torch.Tensor:
        return self.net(torch.as_tensor(np.asarray(obs, np.float32)).reshape(len(obs), -1))

    def _choose(self, q: torch.Tensor) -> np.ndarray:
        return q.argmax(1).numpy().astype(np.int64)

    def get_action(self, obs, explore):
        with torch.no_grad():
            greedy = self._choose(self._q(obs))
        if not explore:
            return greedy
        rand = self._rng.integers(0, self.n_actions, len(obs))
        return np.where(self._rng.random(len(obs)) < 0.2, rand, greedy).astype(np.int64)

    def update_policy(self, batch, weights):
        act = torch.as_tensor(np.asarray(batch.action, np.int64))
        rew = torch.as_tensor(np.asarray(batch.reward, np.float32))
        done = torch.as_tensor(np.asarray(batch.done, np.bool_))
        with torch.no_grad():
            target = rew + 0.99 * (~done).float() * self._q(batch.next_obs).max(1).values
        q = self._q(batch.obs).gather(1, act[:, None]).squeeze(1)
        td = q - target
        loss = (torch.as_tensor(np.asarray(weights, np.float32)) * td.square()).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return UpdateResult(td_errors=td.detach().abs().numpy(), metrics={"loss": float(loss.detach())})

    def get_weights(self):
        return {k: v.detach().numpy().copy() for k, v in self.net.state_dict().items()}

    def set_weights(self, weights):
        self.net.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})


class Opposite(TinyQ):
    """Acts with the argmin: no network of it computes the action the way export knows."""

    acting_net = None

    def _choose(self, q):
        return q.argmin(1).numpy().astype(np.int64)


class _Argmin(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, obs):
        return self.net(torch.flatten(obs, 1)).argmin(dim=1)


class OppositeExported(Opposite):
    def export_module(self):
        return _Argmin(self.net)


class WrongExport(Opposite):
    def export_module(self):
        return _Argmin(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)))


def shift_actions(env):
    """CartPole with actions ``Discrete(2, start=10)`` (a wrapper the run config names by import path)."""

    class Shift(gym.ActionWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.action_space = gym.spaces.Discrete(env.action_space.n, start=10)

        def action(self, action):
            return int(action) - 10

    return Shift(env)


# --------------------------------------------------------------------------------------
# Tiny runs, one per algorithm
# --------------------------------------------------------------------------------------
TINY_DQN = {"hidden_sizes": [16], "eps_decay_steps": 300, "target_update_every": 20}
TINY_AC = {"actor_hidden": [16], "critic_hidden": [16]}
RUNS = {
    "dqn": dict(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", trainer_kwargs=TINY_DQN),
    "dqn_start": dict(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", trainer_kwargs=TINY_DQN,
                      env_wrappers=("test_policy:shift_actions",)),
    "cnn_dqn": dict(env_id="MinAtar/Breakout-v1", trainer="pearl_core.algorithms:DQN",
                    trainer_kwargs={**TINY_DQN, "hidden_sizes": [8]}),
    "sac": dict(env_id="Pendulum-v1", trainer="pearl_core.algorithms:SAC", trainer_kwargs=TINY_AC),
    "td3": dict(env_id="Pendulum-v1", trainer="pearl_core.algorithms:TD3", trainer_kwargs=TINY_AC),
    "ddpg": dict(env_id="Pendulum-v1", trainer="pearl_core.algorithms:DDPG", trainer_kwargs=TINY_AC),
    "user": dict(env_id="CartPole-v1", trainer="test_policy:TinyQ", trainer_kwargs={}),
}


def train(root, name: str) -> str:
    kw = RUNS[name]
    cfg = RunConfig(**kw, replay=ReplayConfig(capacity=1_000, fanout=8), batch_size=16, learning_starts=100,
                    replay_ratio=0.25, train_every=50, stop=StopCriteria(max_env_steps=300),
                    log_dir=str(root / name), seed=0)
    SerialRuntime(cfg, progress=False, tensorboard=False, plot=False).run()
    return cfg.log_dir


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("policies")


_TRAINED: dict[str, str] = {}


@pytest.fixture(scope="module", params=list(RUNS))
def run_dir(request, root):
    name = request.param
    if name == "cnn_dqn":
        pytest.importorskip("minatar", reason="the CNN DQN needs MinAtar (make test installs '.[pixels]')")
    if name not in _TRAINED:
        _TRAINED[name] = train(root, name)
    return _TRAINED[name]


def in_space(space, actions) -> bool:
    return all(space.contains(a) for a in actions)


# --------------------------------------------------------------------------------------
# Every algorithm: load, predict, evaluate, export
# --------------------------------------------------------------------------------------
def test_load_from_the_run_directory_and_from_the_checkpoint_file(run_dir):
    rng = torch.get_rng_state()
    policy = load_policy(run_dir)
    assert torch.equal(torch.get_rng_state(), rng)  # loading leaves the caller's torch RNG alone
    ck_file = os.path.join(run_dir, "checkpoint.pt")
    assert os.path.samefile(policy.checkpoint, ck_file)
    cfg = load_checkpoint(ck_file).config
    assert policy.env_id == cfg.env_id and policy.config == cfg and policy.env_steps == 300
    assert type(policy.trainer).__name__ == cfg.trainer.split(":")[1]
    again = load_policy(ck_file)
    obs = np.stack([policy.observation_space.sample() for _ in range(5)])
    np.testing.assert_array_equal(policy.predict(obs), again.predict(obs))
    assert "checkpoint.pt" in repr(policy)


def test_predict_one_observation_and_a_batch_in_the_envs_own_space(run_dir):
    policy = load_policy(run_dir)
    env = make_env(policy.env_id, 0, **policy.config.env_options)
    obs, _ = env.reset(seed=0)
    env.close()
    one = policy.predict(obs)
    batch = np.stack([obs] + [policy.observation_space.sample() for _ in range(6)])
    many = policy.predict(batch)
    explored = policy.predict(batch, deterministic=False)
    space = policy.action_space
    if policy.discrete:
        assert isinstance(one, np.int64) and many.shape == (7,) and many.dtype == np.int64
        assert int(one) == int(many[0]) and explored.dtype == np.int64
    else:
        assert one.shape == space.shape and one.dtype == space.dtype
        assert many.shape == (7, *space.shape) and many.dtype == space.dtype
        np.testing.assert_allclose(one, many[0], rtol=0, atol=1e-5)  # BLAS may sum a row of one otherwise
    assert space.contains(one) and in_space(space, many) and in_space(space, explored)
    if run_dir.endswith("dqn_start"):
        assert set(many.tolist()) <= {10, 11}
    np.testing.assert_array_equal(policy.predict(batch), many)  # deterministic is deterministic
    assert policy.predict(batch[:0]).shape == (0, *space.shape)
    # bad shapes name expected vs found
    shape = policy.observation_space.shape
    for bad in (np.zeros((2, 3, *shape)), np.zeros(shape[:-1] + (shape[-1] + 1,)), np.zeros(shape[1:])):
        with pytest.raises(InvalidValueError, match=re.escape(f"observation of shape {bad.shape}; expected one "
                                                              f"observation of shape {shape} or a batch")):
            policy.predict(bad)
    with pytest.raises(InvalidValueError, match="expected numbers"):
        policy.predict(np.array(["a"] * int(np.prod(shape))).reshape(shape))


def test_evaluate_policy_is_finite_and_deterministic_for_a_seed(run_dir):
    policy = load_policy(run_dir)
    a = evaluate_policy(policy, n_episodes=2, seed=3)
    b = evaluate_policy(policy, n_episodes=2, seed=3)
    assert all(math.isfinite(x) for x in a) and a[1] >= 0.0 and a == b
    assert all(isinstance(x, float) for x in a)
    mean, std = evaluate_policy(policy, policy.env_id, n_episodes=2, seed=3, deterministic=False, n_envs=1)
    assert math.isfinite(mean) and math.isfinite(std)


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_export_computes_predicts_greedy_actions(run_dir, fmt, tmp_path):
    policy = load_policy(run_dir)
    path = tmp_path / "policy.pt" if fmt == "torchscript" else tmp_path / "sub" / "policy.onnx"  # parents made
    if fmt == "onnx":
        pytest.importorskip("onnx", reason="ONNX export needs onnx (pip install 'pearl-core[export]')")
        ort = pytest.importorskip("onnxruntime", reason="checking the ONNX model needs onnxruntime")
    assert policy.export(path, format=fmt) == path and path.is_file()
    space = policy.observation_space
    space.seed(7)
    for n in (1, 5):
        obs = np.stack([space.sample() for _ in range(n)])
        x = obs.astype(np.float32)
        if fmt == "torchscript":
            with torch.no_grad():
                got = torch.jit.load(str(path))(torch.from_numpy(x)).numpy()
        else:
            got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"obs": x})[0]
        want = policy.predict(obs)
        assert got.shape == want.shape
        if policy.discrete:
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)
        else:
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
def dqn_dir(root) -> str:
    if "dqn" not in _TRAINED:
        _TRAINED["dqn"] = train(root, "dqn")
    return _TRAINED["dqn"]


def test_a_missing_path_or_a_directory_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match=r"does not exist; expected a run directory.*Fix:") as err:
        load_policy(tmp_path / "nope")
    assert isinstance(err.value, FileNotFoundError)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    with pytest.raises(CheckpointNotFoundError, match=r"holds no checkpoint; expected checkpoint.pt.*"
                                                      r"found \['config.json'\].*ended before writing one.*Fix:"):
        load_policy(tmp_path / "run")


def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    other = tmp_path / "weights.pt"
    torch.save({"w": torch.zeros(2)}, other)
    for path in (text, other):
        with pytest.raises(NotACheckpointError, match=r"is not a checkpoint PEARL can read; expected a checkpoint "
                                                      r"written by a PEARL run.*Found:.*Fix:") as err:
            load_policy(path)
        assert isinstance(err.value, SpecError)


def test_a_trainer_that_cannot_be_imported_is_refused(root, tmp_path):
    ck = load_checkpoint(os.path.join(dqn_dir(root), "checkpoint.pt"))
    policy = load_policy(dqn_dir(root))
    for trainer in ("pearl_no_such_module:DQN", "pearl_core.algorithms:NoSuchTrainer"):
        path = save_checkpoint(tmp_path / "ck.pt", trainer=policy.trainer, state=ck.state, monitor=ck.monitor,
                               config=dataclasses.replace(ck.config, trainer=trainer), plan=ck.plan)
        with pytest.raises(TrainerImportError, match=rf"trained by '{trainer}', which cannot be imported here.*"
                                                     "Fix: install the package") as err:
            load_policy(path, trust_modules=True)
        assert isinstance(err.value, ImportError)


def test_a_module_the_checkpoint_names_is_imported_only_once_trusted_or_imported(root, tmp_path, monkeypatch):
    ck = load_checkpoint(os.path.join(dqn_dir(root), "checkpoint.pt"))
    policy = load_policy(dqn_dir(root))
    module = f"pearl_policy_trust_probe_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text("import pathlib\npathlib.Path(__file__).with_name('ran').write_text('x')\n"
                                           "from pearl_core.algorithms import DQN\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = save_checkpoint(tmp_path / "ck.pt", trainer=policy.trainer, state=ck.state, monitor=ck.monitor,
                           config=dataclasses.replace(ck.config, trainer=f"{module}:DQN"), plan=ck.plan)
    try:
        with pytest.raises(UntrustedCheckpointError, match=rf"\['{module}'\].*Nothing was imported.*"
                                                           r"load_policy\(path, trust_modules=True\).*--trust-check"):
            load_policy(path)
        assert not (tmp_path / "ran").exists() and module not in sys.modules  # nothing of it ran
        trusted = load_policy(path, trust_modules=True)
        assert (tmp_path / "ran").exists()
        obs = np.stack([policy.observation_space.sample() for _ in range(4)])
        np.testing.assert_array_equal(trusted.predict(obs), policy.predict(obs))
        assert load_policy(path).checkpoint == path  # imported in this process already: importing runs nothing
    finally:
        sys.modules.pop(module, None)


def test_state_that_does_not_fit_and_an_env_that_cannot_be_made(root, tmp_path):
    ck = load_checkpoint(os.path.join(dqn_dir(root), "checkpoint.pt"))
    policy = load_policy(dqn_dir(root))

    def resave(**changes):
        return save_checkpoint(tmp_path / "ck.pt", trainer=policy.trainer, state=ck.state, monitor=ck.monitor,
                               config=dataclasses.replace(ck.config, **changes), plan=ck.plan)

    wider = resave(trainer_kwargs={**TINY_DQN, "hidden_sizes": [32]})
    with pytest.raises(NotACheckpointError, match=r"does not load into pearl_core.algorithms:DQN built with the "
                                                  r"run's trainer_kwargs .*\[32\].*q_net.*Fix:"):
        load_policy(wider)
    elsewhere = resave(env_id="PearlNoSuchEnv-v0")
    with pytest.raises(SpecError, match=r"spaces of the run's environment 'PearlNoSuchEnv-v0' cannot be read.*"
                                        r"or pass observation_space= and action_space="):
        load_policy(elsewhere)
    given = load_policy(elsewhere, observation_space=policy.observation_space, action_space=policy.action_space)
    obs = np.stack([policy.observation_space.sample() for _ in range(4)])
    np.testing.assert_array_equal(given.predict(obs), policy.predict(obs))
    assert given.env_id == "PearlNoSuchEnv-v0"


def test_a_run_directory_without_its_own_checkpoint_gives_its_newest_run(root, tmp_path):
    src = os.path.join(dqn_dir(root), "checkpoint.pt")
    for i, when in ((1, 1_000_000), (2, 2_000_000)):
        (tmp_path / str(i)).mkdir()
        shutil.copy(src, tmp_path / str(i) / "checkpoint.pt")
        os.utime(tmp_path / str(i) / "checkpoint.pt", (when, when))
    assert load_policy(tmp_path).checkpoint == tmp_path / "2" / "checkpoint.pt"
    shutil.copy(src, tmp_path / "final.pt")
    assert load_policy(tmp_path).checkpoint == tmp_path / "final.pt"


def test_export_and_evaluate_errors(root, tmp_path):
    policy = load_policy(dqn_dir(root))
    with pytest.raises(InvalidValueError, match=r"format = 'keras'; expected one of \['torchscript', 'onnx'\]"):
        policy.export(tmp_path / "p", format="keras")
    with pytest.raises(InvalidValueError, match=r"observation shape \(3,\).*expected the policy's, \(4,\)"):
        evaluate_policy(policy, "Pendulum-v1", n_episodes=1)
    with pytest.raises(InvalidValueError, match="n_episodes = 0; expected an int >= 1"):
        evaluate_policy(policy, n_episodes=0)
    with pytest.raises(InvalidValueError, match="expected a Policy"):
        evaluate_policy(policy.trainer)


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_a_user_trainer_exports_by_its_acting_net_or_its_export_module_else_says_what_to_provide(tmp_path):
    env = gym.make("CartPole-v1")
    spaces = dict(observation_space=env.observation_space, action_space=env.action_space)
    env.close()
    plain = Policy(TinyQ(**spaces, seed=0), **spaces)
    assert plain.checkpoint is None and plain.env_id is None
    plain.export(tmp_path / "plain.pt")
    with pytest.raises(ExportError, match=r"no network of Opposite computes predict's greedy actions.*"
                                          r"Fix: give the trainer a method export_module\(self\)"):
        Policy(Opposite(**spaces), **spaces).export(tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
    exported = Policy(OppositeExported(**spaces), **spaces)
    path = exported.export(tmp_path / "argmin.pt")
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_array_equal(torch.jit.load(str(path))(torch.from_numpy(obs)).numpy(), exported.predict(obs))
    with pytest.raises(ExportError, match=r"WrongExport.export_module\(\) does not compute predict's actions"):
        Policy(WrongExport(**spaces), **spaces).export(tmp_path / "y.pt")
    with pytest.raises(InvalidValueError, match="no env_id given"):
        evaluate_policy(plain)
    assert math.isfinite(evaluate_policy(plain, "CartPole-v1", n_episodes=1)[0])


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_the_readme_example_runs(root, tmp_path, monkeypatch):
    pytest.importorskip("onnx", reason="the example exports to ONNX too (pip install 'pearl-core[export]')")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Using a trained policy", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "load_policy" in code and "evaluate_policy" in code and "export" in code
    monkeypatch.chdir(tmp_path)
    exec(compile(code.replace('"runs/demo"', repr(dqn_dir(root))), "README.md", "exec"), {})
    assert (tmp_path / "policy.pt").is_file() and (tmp_path / "policy.onnx").is_file()
