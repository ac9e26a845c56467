"""How many actors the composer chooses when the user leaves it (:mod:`pearl_core.composer.actors`).

* the rule on injected measurements: a learner-bound run gets few actors, an actor-bound one up to the
  cap, the cap comes from the host's cores less the host loop and the learner side, the reason carries
  the numbers; a what-if plan uses the analytic rule and says so;
* ``settle_actors`` plans again at the chosen N (over the same rows) until N settles;
* the Composer and ``pearl plan`` accept ``auto`` (and an explicit N is kept as given).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from pearl_core.algorithms import DQN
from pearl_core.composer import Composer, actors, workload_for_env
from pearl_core.composer.actors import MAX_PASSES, RowMemo, choose_n_actors, parse_actors, settle_actors
from pearl_core.composer.knobs import KnobChoice
from pearl_core.errors import ComposerError

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"  # a described many-core host (what-if here)
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"


def test_a_learner_bound_run_gets_one_actor():
    # 100 us per iteration at replay ratio 0.5: 20,000 env steps/s; one actor gives 50,000 (20 us each)
    c = choose_n_actors(iteration_s=100e-6, replay_ratio=0.5, cores=16, learner_threads=1, envs_per_actor=4,
                        actor_s=20e-6)
    assert (c.name, c.value, c.chosen_by) == ("n_actors", 1, "composer")
    assert c.measured_s == {4: 20e-6} and c.learner_s == 100e-6
    for number in ("20,000 env steps/s", "50,000 env steps/s", "100.0 us per iteration", "4 env(s)",
                   "ceil(20,000 / 50,000) = 1", "leave 14 for actors"):
        assert number in c.reason, (number, c.reason)


def test_an_actor_bound_run_gets_the_fewest_that_cover_the_learner():
    # 10 us per iteration at ratio 1: 100,000 env steps/s; an actor gives 10,000 (100 us each): 10 of them
    c = choose_n_actors(iteration_s=10e-6, replay_ratio=1.0, cores=16, learner_threads=1, actor_s=100e-6)
    assert c.value == 10 and "the fewest that cover the learner: ceil(100,000 / 10,000) = 10" in c.reason
    # 11 us: 90,909 env steps/s, still 10 actors (9.09 rounded up); 9 us: 111,111, 12 actors
    assert choose_n_actors(iteration_s=11e-6, replay_ratio=1.0, cores=16, learner_threads=1, actor_s=100e-6).value == 10
    assert choose_n_actors(iteration_s=9e-6, replay_ratio=1.0, cores=16, learner_threads=1, actor_s=100e-6).value == 12


def test_an_actor_bound_run_is_capped_by_the_cores_the_learner_leaves():
    # an actor of 1 ms per experience: 100 would be needed; 16 cores less the host loop and 1 learner thread: 14
    c = choose_n_actors(iteration_s=10e-6, replay_ratio=1.0, cores=16, learner_threads=1, actor_s=1e-3)
    assert c.value == 14 and "capped by the cores: 100 would cover the learner" in c.reason
    assert "16 core(s) less 1 for the host loop and 1 for the learner side leave 14" in c.reason
    # four learner threads keep four cores
    assert choose_n_actors(iteration_s=10e-6, replay_ratio=1.0, cores=16, learner_threads=4, actor_s=1e-3).value == 11
    # a 2-core machine leaves no core: one actor, and the reason says it shares one
    small = choose_n_actors(iteration_s=10e-6, replay_ratio=1.0, cores=2, learner_threads=1, actor_s=1e-3)
    assert small.value == 1 and "no core is left for actors" in small.reason


def test_a_what_if_plan_uses_the_analytic_rule_and_says_so():
    c = choose_n_actors(iteration_s=50e-6, replay_ratio=0.25, cores=32, learner_threads=2)
    assert (c.value, c.chosen_by, c.measured_s) == (29, "analytic", {})
    assert "analytic rule: no actor was measured" in c.reason and "80,000 env steps/s" in c.reason
    assert choose_n_actors(iteration_s=50e-6, replay_ratio=0.25, cores=2, learner_threads=1).value == 1


@pytest.mark.parametrize("bad", [{"iteration_s": 0.0}, {"iteration_s": math.nan}, {"replay_ratio": -1.0},
                                 {"actor_s": 0.0}, {"actor_s": math.inf}])
def test_bad_numbers_are_refused(bad):
    kw = {"iteration_s": 1e-4, "replay_ratio": 0.5, "cores": 4, "learner_threads": 1, "actor_s": 1e-5, **bad}
    with pytest.raises(ComposerError, match="expected"):
        choose_n_actors(**kw)


def test_parse_actors():
    assert parse_actors(None, "w") is None and parse_actors("auto", "w") is None and parse_actors(" AUTO ", "w") is None
    assert parse_actors(3, "w") == 3 and parse_actors("4", "w") == 4
    for bad in ("x", "2.5", "-1", ""):
        with pytest.raises(ComposerError, match="--actors auto"):
            parse_actors(bad, "pearl plan")


@pytest.mark.parametrize("bad", [0, "0", True, 2.5])
def test_set_actors_refuses_a_bad_count(bad):
    with pytest.raises(ComposerError, match=r"Composer.set_actors: n_actors = .* expected an int >= 1"):
        Composer(THIS_MACHINE).set_actors("CartPole-v1", n_actors=bad)


def _fake(n, *, iteration_s, learner_threads):
    plan = SimpleNamespace(chosen=SimpleNamespace(iteration_s=iteration_s), spec={"host": "cpu0"},
                           matrix=SimpleNamespace(devices=()))
    rp = SimpleNamespace(envs_per_actor=1, learner_threads=learner_threads, learner_device="cpu")
    return plan, rp, f"refusals at {n}"


def test_settle_actors_plans_again_at_the_chosen_count():
    wl = workload_for_env("CartPole-v1", 32, hidden_sizes=(32, 32), replay="uniform", capacity=4096, insert_batch=2)
    spec = SimpleNamespace(host="cpu0", devices=[SimpleNamespace(name="cpu0", threads=16, cores=16)])
    envs = KnobChoice("envs_per_actor", 1, "composer", {1: 100e-6})  # 10,000 env steps/s per actor
    asked = []

    def plan_at(w):  # the learner's threads shrink as actors take cores: 4 at one actor, 2 from 3 on
        asked.append(w.n_actors)
        return _fake(w.n_actors, iteration_s=20e-6, learner_threads=4 if w.n_actors < 3 else 2)

    # 20 us at ratio 0.5: 100,000 env steps/s, 10 actors wanted; 16 - 1 - 4 = 11 at the first plan
    result, choice = settle_actors(plan_at, wl, spec=spec, present=False, measured=True, replay_ratio=0.5,
                                   envs_choice=envs)
    assert choice.chosen_by == "analytic"  # a host that is not this machine: nothing measured applies
    assert asked == [1, 11, 13] and choice.value == 13 and result[2] == "refusals at 13"
    asked.clear()
    result, choice = settle_actors(plan_at, wl, spec=spec, present=True, measured=True, replay_ratio=0.5,
                                   envs_choice=envs)
    # this machine's cores bound the cap (present): whatever they are, the plan used is made at the choice
    assert asked[-1] == choice.value and result[2] == f"refusals at {choice.value}"


def test_settle_actors_stops_after_max_passes(monkeypatch):
    wl = workload_for_env("CartPole-v1", 32, hidden_sizes=(32, 32), replay="uniform", capacity=4096, insert_batch=2)
    spec = SimpleNamespace(host="cpu0", devices=[SimpleNamespace(name="cpu0", threads=16, cores=16)])
    asked = []

    def flipping(w):  # few actors: a learner of 10 threads; many: of 1 (a plan that never settles)
        asked.append(w.n_actors)
        return _fake(w.n_actors, iteration_s=1e-3, learner_threads=10 if w.n_actors > 5 else 1)

    result, choice = settle_actors(flipping, wl, spec=spec, present=False, measured=False, replay_ratio=0.5)
    assert len(asked) == MAX_PASSES + 1 and asked[-1] == choice.value and "without settling" in choice.reason


def test_row_memo_measures_each_device_once():
    calls = []

    def profiler(device, wl):
        calls.append((device.name, wl))
        return f"row of {device.name}"

    memo = RowMemo(profiler)
    a, b = SimpleNamespace(name="a"), SimpleNamespace(name="b")
    assert [memo(a, 1), memo(a, 2), memo(b, 3), memo(b, 4)] == ["row of a", "row of a", "row of b", "row of b"]
    assert calls == [("a", 1), ("b", 3)]


def _cartpole(c: Composer, n_actors) -> Composer:
    c.set_actors("CartPole-v1", n_actors=n_actors)
    c.set_train_function(DQN, batch_size=32, hidden_sizes=(32, 32))
    c.set_replay("uniform", capacity=4_096, fanout=8)
    return c


def test_the_composer_chooses_n_on_a_what_if_plan_and_keeps_a_users(tmp_path):
    comp = _cartpole(Composer(SPEC, cache_dir=tmp_path), "auto").run(profile=False)
    rec = comp.plan.tuning["knobs"]["n_actors"]
    host = next(d for d in comp.plan.spec["device"] if d["name"] == comp.plan.spec["host"])
    cores = host.get("threads") or host["cores"]
    want = cores - 1 - actors.learner_side_threads(comp.runtime_plan)
    assert rec["chosen_by"] == "analytic" and rec["value"] == want > 1
    assert comp.runtime_plan.n_actors == comp.plan.workload["n_actors"] == want
    assert json.loads(comp.plan.to_json())["tuning"]["knobs"]["n_actors"]["value"] == want  # kept in the plan JSON
    user = _cartpole(Composer(SPEC, cache_dir=tmp_path), 3).run(profile=False)
    assert user.runtime_plan.n_actors == user.plan.workload["n_actors"] == 3 and "knobs" not in user.plan.tuning


def test_pearl_plan_accepts_actors_auto(tmp_path):
    from typer.testing import CliRunner

    from pearl_core.cli import app

    out = tmp_path / "plan.json"
    res = CliRunner().invoke(app, ["plan", "-H", str(SPEC), "--no-profile", "--actors", "auto", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "analytic rule" in res.output  # the reason is printed with the plan
    data = json.loads(out.read_text())
    assert data["workload"]["n_actors"] == data["tuning"]["knobs"]["n_actors"]["value"] > 1
    bad = CliRunner().invoke(app, ["plan", "-H", str(SPEC), "--no-profile", "--actors", "many"])
    assert bad.exit_code != 0 and "--actors auto" in bad.output


def test_profiling_here_chooses_n_from_the_measured_actor(tmp_path, monkeypatch):
    from pearl_core.composer import profiling

    monkeypatch.setattr(profiling, "profile_actor_step", lambda wl, iterations=500, budget_s=None: 1e-3)
    monkeypatch.setattr(actors, "host_cores", lambda spec, present: 16)  # as on a 16-core machine
    comp = _cartpole(Composer(None, profile_iterations=20, cache_dir=tmp_path), None).run()
    rec = comp.plan.tuning["knobs"]["n_actors"]
    rp = comp.runtime_plan
    assert rec["chosen_by"] == "composer" and rec["measured_s"] == {str(rp.envs_per_actor): 1e-3}
    demand = 1.0 / (comp.plan.chosen.iteration_s * 0.5)
    cap = 16 - 1 - actors.learner_side_threads(rp)
    assert rp.n_actors == comp.plan.workload["n_actors"] == rec["value"] == max(1, min(math.ceil(demand / 1e3), cap))
    assert rp.n_actors > 1 and "1,000 env steps/s" in rec["reason"]
