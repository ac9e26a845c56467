"""Vector back ends of the Collector (``RuntimePlan.vector_backend``, :mod:`pearl_core.runtime.vector`).

* gym-sync and gym-async against the loop back end on CartPole and Pendulum, episode ends inside the
  run: bitwise the same rows, episodes and warm-up actions;
* EnvPool (skipped when not installed): shapes and dtypes, no reset observation stored as a
  ``next_obs`` (done rows end in CartPole's terminal states), episode stats that add up to the steps;
* the NaN drop and stop paths, and ``n_step = 3``, through gym-sync equal the loop back end;
* the serial and the parallel runtime (setting 2, one actor, 4 envs) train DQN on CartPole with
  gym-sync and EnvPool; gym-async in the serial runtime, refused for actor processes;
* bad values refused with a clear error; the composer's choice rule.
"""

from __future__ import annotations

import numpy as np
import pytest

import faulty_envs  # noqa: F401 - registers the PearlFaulty/ environments
from pearl_core.errors import DataError, SpecError
from pearl_core.runtime.acting import Collector
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
from pearl_core.runtime.vector import (check_vector_backend, choose_vector_backend,
                                       envpool_available, make_vector_envs)

needs_envpool = pytest.mark.skipif(not envpool_available(), reason="EnvPool is not installed")
FIELDS = ("obs", "action", "reward", "next_obs", "done", "steps")
OPTIONS = {"kwargs": None, "wrappers": None}


class RandomPolicy:
    """A seeded uniform policy with a discount (for n-step) and the run's env-step count (for the warm-up)."""

    gamma = 0.9

    def __init__(self, space, seed=0):
        self.space, self.rng, self.env_steps = space, np.random.default_rng(seed), 0

    def get_action(self, obs, explore=True):
        if hasattr(self.space, "n"):
            return self.rng.integers(0, self.space.n, len(obs))
        lo, hi = self.space.low, self.space.high
        return self.rng.uniform(lo, hi, (len(obs), *self.space.shape)).astype(self.space.dtype)


def collect(backend, env_id, n_envs=4, steps=150, seed=10, env_options=OPTIONS, **kw):
    seeds = [seed + i for i in range(n_envs)]
    col = Collector(make_vector_envs(backend, env_id, seeds, env_options), seeds, env_id=env_id, **kw)
    policy = RandomPolicy(col.vec.action_space)
    outs = []
    try:
        for _ in range(steps):
            out = col.step(policy)
            policy.env_steps += out.env_steps
            outs.append(out)
    finally:
        col.close()
    return col, outs


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for f in FIELDS:
            gx, gy = getattr(x, f), getattr(y, f)
            assert gx.dtype == gy.dtype, f
            np.testing.assert_array_equal(gx, gy, err_msg=f)
        assert x.episodes == y.episodes and x.dropped == y.dropped and x.env_steps == y.env_steps


# --------------------------------------------------------------------------- gymnasium's vector envs


@pytest.mark.parametrize("backend", ["gym-sync", "gym-async"])
@pytest.mark.parametrize("env_id, steps", [("CartPole-v1", 150), ("Pendulum-v1", 230)])
def test_gym_vector_envs_are_bitwise_the_loop(backend, env_id, steps):
    """Same seeds, same actions (warm-up draws included): the same rows, the true final observation at
    every episode end (Pendulum's end by truncation at 200), the same episodes."""
    _, ref = collect("loop", env_id, steps=steps, random_steps=40)
    _, got = collect(backend, env_id, steps=steps, random_steps=40)
    assert sum(len(o.episodes) for o in ref) >= 4  # episodes end inside the run
    assert_same(ref, got)


def test_gym_sync_nan_drops_and_stops_as_the_loop_does():
    """A faulty env's NaN rewards: the same rows dropped and counted; 'stop' raises the same message."""
    env_id = "PearlFaulty/SomeNaN-v0"
    opts = {"kwargs": None, "wrappers": ()}
    a, ref = collect("loop", env_id, n_envs=3, steps=120, env_options=opts, on_nonfinite="drop")
    b, got = collect("gym-sync", env_id, n_envs=3, steps=120, env_options=opts, on_nonfinite="drop")
    assert a.dropped == b.dropped > 0 and a.last_drop == b.last_drop
    assert_same(ref, got)
    msgs = []
    for backend in ("loop", "gym-sync"):
        with pytest.raises(DataError) as info:
            collect(backend, env_id, n_envs=3, steps=120, env_options=opts)
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1] and "non-finite reward" in msgs[0]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_n_step_through_gym_sync_is_the_loop(env_id):
    _, ref = collect("loop", env_id, steps=220, n_step=3)
    col, got = collect("gym-sync", env_id, steps=220, n_step=3)
    assert any((o.steps < 3).any() for o in ref)  # windows cut by episode ends
    assert_same(ref, got)


# --------------------------------------------------------------------------- EnvPool


def _is_terminal_cartpole(s) -> bool:
    return abs(float(s[0])) > 2.4 or abs(float(s[2])) > 0.2095


@needs_envpool
def test_envpool_cartpole_rows_are_true_transitions():
    n, steps = 4, 200
    col, outs = collect("envpool", "CartPole-v1", n_envs=n, steps=steps)
    _, ref = collect("loop", "CartPole-v1", n_envs=n, steps=2)
    for f in ("obs", "action", "reward", "next_obs", "done"):
        assert getattr(outs[0], f).dtype == getattr(ref[0], f).dtype, f
        assert getattr(outs[0], f).shape == getattr(ref[0], f).shape, f
    ended = 0
    for t, out in enumerate(outs):
        ends = {e.env_index: e for e in out.episodes}
        for i in range(n):
            if i in ends:  # the stored next_obs is the final state, never EnvPool's reset observation
                ended += 1
                if ends[i].terminated:
                    assert out.done[i] and _is_terminal_cartpole(out.next_obs[i]), (t, i, out.next_obs[i])
                else:
                    assert ends[i].length == 500 and not out.done[i]
                if t + 1 < steps:  # the next step starts from a fresh reset state
                    nxt = outs[t + 1].obs[i]
                    assert np.all(np.abs(nxt) <= 0.05) and not np.array_equal(nxt, out.next_obs[i])
            else:
                assert not out.done[i] and not _is_terminal_cartpole(out.next_obs[i])
                if t + 1 < steps:  # no transition lost or duplicated: the next one starts where this ended
                    np.testing.assert_array_equal(outs[t + 1].obs[i], out.next_obs[i])
    assert ended >= 10
    lengths = sum(e.length for o in outs for e in o.episodes) + int(col._lengths.sum())
    assert lengths == n * steps == sum(o.env_steps for o in outs)


@needs_envpool
def test_envpool_pendulum_truncates_at_200_with_true_final_observations():
    n, steps = 3, 450
    col, outs = collect("envpool", "Pendulum-v1", n_envs=n, steps=steps, random_steps=50)
    assert outs[0].obs.shape == (n, 3) and outs[0].obs.dtype == np.float32
    assert outs[0].action.shape == (n, 1) and outs[0].action.dtype == np.float32
    eps = [e for o in outs for e in o.episodes]
    assert len(eps) == 2 * n and all(e.length == 200 and not e.terminated for e in eps)
    for t, out in enumerate(outs[:-1]):
        for i in range(n):
            if any(e.env_index == i for e in out.episodes):  # cos^2 + sin^2 = 1 holds for the final state too
                assert not np.array_equal(outs[t + 1].obs[i], out.next_obs[i])
            else:
                np.testing.assert_array_equal(outs[t + 1].obs[i], out.next_obs[i])
    assert sum(e.length for e in eps) + int(col._lengths.sum()) == n * steps


@needs_envpool
def test_envpool_seeds_env_i_with_seed_plus_i():
    """So an actor's consecutive seeds (actor_env_seeds) give every env its own seed, as the loop does;
    and non-consecutive seeds are refused."""
    from pearl_core.runtime.vector import EnvPoolEnvs

    pool = EnvPoolEnvs("CartPole-v1", [5, 6, 7])
    first = pool.reset([5, 6, 7])
    for i in range(3):
        one = EnvPoolEnvs("CartPole-v1", [5 + i])
        np.testing.assert_array_equal(one.reset([5 + i])[0], first[i])
        one.close()
    pool.close()
    with pytest.raises(SpecError, match="not consecutive"):
        EnvPoolEnvs("CartPole-v1", [5, 7])


@needs_envpool
def test_envpool_n_step_windows_never_cross_an_episode_end():
    _, outs = collect("envpool", "CartPole-v1", steps=150, n_step=3)
    rows = sum(len(o.reward) for o in outs)
    assert rows > 0 and any((o.steps < 3).any() for o in outs)
    for o in outs:
        for k, d, s2 in zip(o.steps, o.done, o.next_obs):
            if d:
                assert _is_terminal_cartpole(s2)


# --------------------------------------------------------------------------- runtimes


def _config(tmp_path, name, steps=400, **kw):
    return RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN",
                     trainer_kwargs={"hidden_sizes": [32, 32], "total_env_steps": steps}, batch_size=16,
                     learning_starts=64, train_every=16, replay_ratio=0.25, replay=ReplayConfig(capacity=2048),
                     stop=StopCriteria(max_env_steps=steps), log_dir=str(tmp_path / name), **kw)


def _backends(*names):
    return [pytest.param(b, marks=needs_envpool) if b == "envpool" else b for b in names]


@pytest.mark.parametrize("backend", _backends("gym-sync", "gym-async", "envpool"))
def test_serial_runtime_trains_dqn_with_a_vector_backend(tmp_path, backend):
    from pearl_core.runtime.serial import SerialRuntime

    plan = RuntimePlan(envs_per_actor=4, insert_batch=16, vector_backend=backend)
    res = SerialRuntime(_config(tmp_path, backend), plan, progress=False, plot=False, tensorboard=False).run()
    assert res.stop_reason == "max_env_steps" and res.env_steps >= 400 and res.updates > 0 and res.episodes > 0


def test_serial_gym_sync_run_is_the_loop_run(tmp_path):
    from pearl_core.runtime.checkpoint import load_checkpoint
    from pearl_core.runtime.serial import SerialRuntime

    res = {}
    for b in ("loop", "gym-sync"):
        plan = RuntimePlan(envs_per_actor=4, insert_batch=16, vector_backend=b)
        res[b] = SerialRuntime(_config(tmp_path, b, save_replay=True), plan, progress=False, plot=False,
                               tensorboard=False).run()
    a, b = (load_checkpoint(r.checkpoint_path).replay for r in res.values())
    for f in ("obs", "action", "reward", "next_obs", "done"):
        np.testing.assert_array_equal(a[f], b[f], err_msg=f)
    assert res["loop"].episodes == res["gym-sync"].episodes


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("backend", _backends("gym-sync", "envpool"))
def test_parallel_runtime_trains_dqn_with_a_vector_backend(tmp_path, backend):
    from pearl_core.runtime.parallel import ParallelRuntime

    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=4, insert_batch=16, queue_size=4,
                       vector_backend=backend)
    rt = ParallelRuntime(_config(tmp_path, backend), plan, progress=False, plot=False, tensorboard=False)
    res = rt.run()
    assert res.stop_reason == "max_env_steps" and res.env_steps == 400 and res.updates > 0 and res.episodes > 0
    assert rt.faults == []


@pytest.mark.usefixtures("no_leaks")
def test_parallel_actor_drops_nan_rows_through_gym_sync(tmp_path):
    """The NaN drop path inside an actor process with a vector back end: counted, reported, run finishes."""
    from pearl_core.runtime.parallel import ParallelRuntime

    cfg = RunConfig(env_id="PearlFaulty/SomeNaN-v0", trainer="faulty_envs:LinearQ", batch_size=16,
                    learning_starts=32, train_every=16, replay=ReplayConfig(capacity=2048),
                    stop=StopCriteria(max_env_steps=400), log_dir=str(tmp_path / "run"), on_nonfinite="drop")
    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=2, insert_batch=8, queue_size=4,
                       vector_backend="gym-sync")
    rt = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False)
    res = rt.run()
    assert res.stop_reason == "max_env_steps" and res.env_steps == 400
    # steps 20, 70, 120, 170 of each of the two envs: 200 vector steps give 400 rows less 8 dropped
    assert 7 <= rt.dropped_nonfinite <= 10 and res.dropped_nonfinite == rt.dropped_nonfinite


def test_gym_async_is_refused_for_actor_processes(tmp_path):
    from pearl_core.runtime.parallel import ParallelRuntime

    plan = RuntimePlan(setting=2, n_actors=1, envs_per_actor=4, vector_backend="gym-async")
    with pytest.raises(SpecError, match="gym-async.*SerialRuntime"):
        ParallelRuntime(_config(tmp_path, "async"), plan, progress=False, plot=False, tensorboard=False)


# --------------------------------------------------------------------------- refusals and the composer


@pytest.mark.parametrize("bad", ["vec", "gym", "", None, 1, "Loop"])
def test_bad_vector_backends_are_refused(bad):
    with pytest.raises(SpecError, match="vector_backend"):
        RuntimePlan(vector_backend=bad)
    with pytest.raises(SpecError, match="expected one of"):
        check_vector_backend(bad)


def test_envpool_is_refused_where_it_would_run_another_env(tmp_path):
    from pearl_core.runtime.serial import SerialRuntime

    if envpool_available():  # kwargs or a wrapper would make PEARL's env differ from EnvPool's
        with pytest.raises(SpecError, match="would differ"):
            check_vector_backend("envpool", "CartPole-v1", {"max_episode_steps": 100})
        with pytest.raises(SpecError, match="no environment 'ALE/Pong-v5'"):
            check_vector_backend("envpool", "ALE/Pong-v5")
        with pytest.raises(SpecError, match="would differ"):
            SerialRuntime(_config(tmp_path, "k", env_kwargs={"max_episode_steps": 100}),
                          RuntimePlan(vector_backend="envpool"), progress=False, plot=False, tensorboard=False)
    else:
        with pytest.raises(SpecError, match="not installed"):
            check_vector_backend("envpool", "CartPole-v1")


def test_the_composer_rule(monkeypatch):
    from pearl_core.runtime import vector

    assert choose_vector_backend("CartPole-v1", 1)[0] == "loop"  # nothing to vectorise, whatever was measured
    # as measured here (benchmarks/README.md): neither gym-sync nor EnvPool beat the loop
    assert vector.MEASURED_FASTER_THAN_LOOP == {"gym-sync": False, "envpool": False}
    assert choose_vector_backend("CartPole-v1", 8)[0] == "loop"
    monkeypatch.setitem(vector.MEASURED_FASTER_THAN_LOOP, "gym-sync", True)
    assert choose_vector_backend("CartPole-v1", 8)[0] == "gym-sync"
    assert choose_vector_backend("ALE/Pong-v5", 8)[0] == "gym-sync"
    monkeypatch.setitem(vector.MEASURED_FASTER_THAN_LOOP, "envpool", True)
    assert choose_vector_backend("CartPole-v1", 1)[0] == "loop"
    assert choose_vector_backend("CartPole-v1", 8)[0] == ("envpool" if envpool_available() else "gym-sync")
    # EnvPool's Pong is another env (its own preprocessing); kwargs would make PEARL's env differ
    assert choose_vector_backend("ALE/Pong-v5", 8)[0] == "gym-sync"
    assert choose_vector_backend("CartPole-v1", 8, {"max_episode_steps": 100})[0] == "gym-sync"
    assert choose_vector_backend("CartPole-v1", 8, None, ["atari"])[0] == "gym-sync"
    monkeypatch.setitem(vector.MEASURED_FASTER_THAN_LOOP, "gym-sync", False)
    assert choose_vector_backend("ALE/Pong-v5", 8)[0] == "loop"
    assert "was not measured faster" in choose_vector_backend("ALE/Pong-v5", 8)[1]


def test_a_vector_step_heartbeat_names_all_envs():
    """The parallel runtime's watchdog reads what a stalled actor was doing from its heartbeat word."""
    from pearl_core.runtime.messages import ALL_ENVS, Phase

    marks = []
    seeds = [0, 1]
    vec = make_vector_envs("gym-sync", "CartPole-v1", seeds, OPTIONS, mark=lambda p, a=0: marks.append((p, a)))
    col = Collector(vec, seeds)
    col.step(RandomPolicy(col.vec.action_space))
    col.close()
    assert (int(Phase.ENV_STEP), ALL_ENVS) in marks and (int(Phase.ENV_RESET), ALL_ENVS) in marks
    assert Phase.ENV_STEP.describe(ALL_ENVS) == "in a vector env step (all environments)"
    assert Phase.ENV_STEP.describe(3) == "in env.step of environment 3"
    assert (0xFFFFFFFF & ALL_ENVS) == ALL_ENVS  # survives the heartbeat word's 32-bit argument
