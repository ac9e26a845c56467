"""The runtime knobs the composer chooses (:mod:`pearl_core.composer.knobs`): envs per actor.

* the rule on given measurements (1 where the actors' time per update is under half the learner's
  step, else the fewest envs within 10% of the fastest time per experience);
* a real measurement on CartPole gives a candidate and a time for each;
* the choice is cached per workload and machine, and a damaged cache entry is measured again;
* the Composer: a user's value is kept and nothing is measured; without profiling (a what-if plan)
  it stays 1 and nothing is recorded; with profiling on this machine the measured choice reaches
  the workload, the runtime plan, the generated program's plan and ``tuning["knobs"]``.
"""

from __future__ import annotations

import dataclasses

import pytest

from pearl_core.algorithms import DQN
from pearl_core.composer import Composer, workload_for_env
from pearl_core.composer import knobs
from pearl_core.composer.knobs import ENVS_CANDIDATES, KnobChoice, cached_envs_choice, choose_envs_per_actor

# an actor's seconds per experience at 1, 2, 4, 8, 16 envs: batching helps until the env steps dominate
FAKE = {1: 100e-6, 2: 60e-6, 4: 41e-6, 8: 37e-6, 16: 36e-6}


def fake_measure(wl, iterations=500, budget_s=None):
    return FAKE[wl.envs_per_actor]


def fast_learner(wl):  # a learner step shorter than the actors' 2 x 100 us per update: the actors matter
    return 100e-6


@pytest.fixture(scope="module")
def wl():
    return workload_for_env("CartPole-v1", 32, hidden_sizes=(32, 32), replay="uniform", capacity=4096, insert_batch=2)


def test_the_fewest_envs_within_ten_percent_of_the_fastest(wl):
    assert wl.insert_batch == 2  # replay ratio 0.5: the actors' time per update is 2 x 100 us at one env
    choice = choose_envs_per_actor(wl, measure=fake_measure, learner=fast_learner)
    # fastest 36 us at 16; within 10% (39.6 us): 8 (37) and 16, not 4 (41): the fewest is 8
    assert (choice.value, choice.chosen_by) == (8, "composer")
    assert choice.measured_s == FAKE
    assert "8 env(s) per actor" in choice.reason and "1: 100.0 us" in choice.reason
    flat = choose_envs_per_actor(wl, measure=lambda w, iterations: 50e-6 * (1 + 0.01 * w.envs_per_actor),
                                 learner=fast_learner)
    assert flat.value == 1  # batching buys nothing: one env
    steep = choose_envs_per_actor(wl, measure=lambda w, iterations: 1e-3 / w.envs_per_actor, learner=fast_learner)
    assert steep.value == 16
    d = choice.to_dict()
    assert d["value"] == 8 and d["measured_s"]["16"] == FAKE[16] and d["chosen_by"] == "composer"
    assert d["learner_s"] == 100e-6


def test_a_learner_bound_run_keeps_one_env(wl):
    # the actors' 200 us per update is under half of a 401 us learner step: more envs buy nothing
    choice = choose_envs_per_actor(wl, measure=fake_measure, learner=lambda w: 401e-6)
    assert choice.value == 1 and "under 50% of the learner's" in choice.reason
    # only one env is measured: no other count could change a learner-bound choice (issue 41, point 8)
    assert choice.measured_s == {1: FAKE[1]} and "other counts not measured" in choice.reason
    # at 399 us the actors are over half of it: the rule of the fastest time per experience applies
    assert choose_envs_per_actor(wl, measure=fake_measure, learner=lambda w: 399e-6).value == 8


def test_a_real_measurement_gives_a_candidate(wl):
    choice = choose_envs_per_actor(wl, candidates=(1, 4), iterations=40)
    assert choice.value in (1, 4)
    assert set(choice.measured_s) == {1, 4} and all(t > 0 for t in choice.measured_s.values())
    assert choice.learner_s > 0


def test_the_choice_is_cached_per_workload(wl, tmp_path, monkeypatch):
    calls = []

    def counting(w, *, candidates=ENVS_CANDIDATES):
        calls.append(w)
        return choose_envs_per_actor(w, candidates=candidates, measure=fake_measure, learner=fast_learner)

    monkeypatch.setattr(knobs, "choose_envs_per_actor", counting)
    first = cached_envs_choice(wl, cache_dir=tmp_path)
    again = cached_envs_choice(dataclasses.replace(wl, envs_per_actor=3), cache_dir=tmp_path)  # envs aside
    assert len(calls) == 1 and again == first and first.value == 8
    other = cached_envs_choice(dataclasses.replace(wl, batch_size=64), cache_dir=tmp_path)
    assert len(calls) == 2 and other.value == 8
    entries = sorted(tmp_path.glob("knob-envs-*.json"))
    assert len(entries) == 2
    for e in entries:
        e.write_text("{ damaged")
    assert cached_envs_choice(wl, cache_dir=tmp_path) == first and len(calls) == 3


def _cartpole(c: Composer, envs_per_actor=None) -> Composer:
    c.set_actors("CartPole-v1", n_actors=1, envs_per_actor=envs_per_actor)
    c.set_train_function(DQN, batch_size=32, hidden_sizes=(32, 32), total_env_steps=5_000)
    c.set_replay("uniform", capacity=4_096, fanout=8)
    return c


def _no_measuring(*a, **k):
    raise AssertionError("nothing should be measured")


def test_a_users_value_is_kept_and_nothing_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs, "choose_envs_per_actor", _no_measuring)
    c = _cartpole(Composer(None, profile_iterations=20, cache_dir=tmp_path), envs_per_actor=2)
    comp = c.run()
    assert comp.runtime_plan.envs_per_actor == 2 and comp.plan.workload["envs_per_actor"] == 2
    assert "knobs" not in comp.plan.tuning


def test_a_what_if_plan_keeps_one_env(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs, "choose_envs_per_actor", _no_measuring)
    comp = _cartpole(Composer(None, cache_dir=tmp_path)).run(profile=False)
    assert comp.runtime_plan.envs_per_actor == 1 and "knobs" not in comp.plan.tuning


def test_profiling_chooses_and_records_it(tmp_path, monkeypatch):
    from pearl_core.composer import profiling

    monkeypatch.setattr(profiling, "profile_actor_step", fake_measure)  # the knob's and the row's actor cell
    c = _cartpole(Composer(None, profile_iterations=20, cache_dir=tmp_path))
    comp = c.run()
    assert comp.runtime_plan.envs_per_actor == 8
    assert comp.plan.workload["envs_per_actor"] == 8 and c.workload().envs_per_actor == 8
    rec = comp.plan.tuning["knobs"]["envs_per_actor"]
    assert rec["value"] == 8 and rec["chosen_by"] == "composer" and set(rec["measured_s"]) == {"1", "2", "4", "8", "16"}
    program = c.RuntimeGen(comp, tmp_path / "runtime.py").read_text()
    assert "envs_per_actor=8" in program.replace(" ", "")
    # the user's value again: it wins over the earlier choice
    c.set_actors("CartPole-v1", n_actors=1, envs_per_actor=1)
    assert c.run().runtime_plan.envs_per_actor == 1


def test_knob_choice_round_trips():
    k = KnobChoice("envs_per_actor", 4, "composer", {1: 2e-5, 4: 1e-5}, "why", 3e-5)
    assert k.to_dict() == {"value": 4, "chosen_by": "composer", "measured_s": {"1": 2e-5, "4": 1e-5}, "reason": "why",
                           "learner_s": 3e-5}
