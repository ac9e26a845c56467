"""The cluster model (pearl_core/composer/cluster.py): cluster specs, where the actors of a Ray run
go, and `pearl plan --cluster`. (Reading a running cluster is tested in test_ray_runtime.py.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl_core.composer.cluster import LOCAL_LINK, RPC_S, ClusterSpec, NodeSpec, place_actors
from pearl_core.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hardware" / "ray-cluster.toml"
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"

# A workload where one actor call (32 experiences) costs 32 x 50 us of acting.
KW = dict(actor_step_s=50e-6, replay_ratio=0.5, experience_bytes=40, weight_bytes=280_000, insert_batch=32)


def cluster(*workers: tuple[str, float, float, float], driver_cpus: float = 2) -> ClusterSpec:
    nodes = [NodeSpec("head", driver_cpus, driver=True)]
    nodes += [NodeSpec(name, cpus, lat, bw) for name, cpus, lat, bw in workers]
    return ClusterSpec(tuple(nodes))


def test_the_example_spec_loads_in_si_units():
    c = ClusterSpec.load(EXAMPLE)
    assert [n.name for n in c.nodes] == ["head", "worker-1", "worker-2"] and c.driver.name == "head"
    w = c.nodes[1]
    assert w.cpus == 8 and w.latency_s == pytest.approx(100e-6) and w.bandwidth_Bps == pytest.approx(1.25e9)
    assert (c.driver.latency_s, c.driver.bandwidth_Bps) == LOCAL_LINK


def test_a_call_costs_acting_plus_the_link():
    c = cluster(("far", 4, 1e-3, 1e6))
    p = place_actors(c, iteration_s=1e-3, n_actors=2, reserve=2, **KW)  # the driver keeps both its CPUs
    assert p.actors == (("far", 2),)
    acting = 32 * 50e-6
    reply = RPC_S + 1e-3 + 32 * 40 / 1e6
    weights = (RPC_S + 1e-3 + 280_000 / 1e6) * min(1.0, 32 * 0.5 / 10)
    assert p.call_s["far"] == pytest.approx(acting + reply + weights)
    assert p.supply == pytest.approx(2 * 32 / p.call_s["far"])
    assert p.demand == pytest.approx(1 / (1e-3 * 0.5))


def test_actors_go_to_the_cheapest_links_first():
    c = cluster(("slow", 8, 2e-3, 1e8), ("fast", 2, 50e-6, 5e9), ("mid", 4, 200e-6, 1e9), driver_cpus=1)
    p = place_actors(c, iteration_s=1e-3, n_actors=5, **KW)
    # head keeps its one CPU (reserve 1); fast (2 slots), then mid (4): 2 + 3
    assert p.actors == (("fast", 2), ("mid", 3))
    assert p.nodes() == ["fast", "fast", "mid", "mid", "mid"] and p.n_actors == 5


def test_by_default_the_fewest_actors_that_keep_the_learner_fed():
    c = cluster(("w1", 8, 100e-6, 1.25e9), ("w2", 8, 100e-6, 1.25e9), driver_cpus=1)
    per_actor = 32 / place_actors(c, iteration_s=1e-3, n_actors=1, **KW).call_s["w1"]
    for iteration_s in (1e-3, 1e-4, 2e-5):
        p = place_actors(c, iteration_s=iteration_s, **KW)
        need = math.ceil(p.demand / per_actor)
        assert p.n_actors == min(need, 16), (iteration_s, p.actors)
        assert p.bound == ("learner" if need <= 16 else "actors")
        assert p.predicted == pytest.approx(min(p.supply, p.demand))


def test_no_room_is_refused_with_the_room_there_is():
    c = cluster(("w1", 2, 100e-6, 1.25e9))
    with pytest.raises(SpecError, match=r"room for 3 actors .* but 4 are asked for"):
        place_actors(c, iteration_s=1e-3, n_actors=4, **KW)
    with pytest.raises(SpecError, match="n_actors = 0"):
        place_actors(c, iteration_s=1e-3, n_actors=0, **KW)
    with pytest.raises(SpecError, match="iteration_s"):
        place_actors(c, iteration_s=float("nan"), **KW)


@pytest.mark.parametrize("text, match", [
    ('[[node]]\nname = "a"\ncpus = 1\nlatency_us = 1\nbandwidth_GBps = 1\n', r"0 driver nodes"),
    ('[[node]]\nname = "a"\ncpus = 1\ndriver = true\n[[node]]\nname = "a"\ncpus = 1\nlatency_us = 1\n'
     'bandwidth_GBps = 1\n', r"appear more than once"),
    ('[[node]]\nname = "a"\ncpus = 1\ndriver = true\n[[node]]\nname = "b"\ncpus = 1\nlatency_us = 1\n',
     r"no bandwidth to the driver's node"),
    ('[[node]]\nname = "a"\ncpus = 1\ndriver = true\nspeed = 3\n', r"unknown keys \['speed'\]"),
    ('[[node]]\nname = "a"\ncpus = -1\ndriver = true\n', r"cpus = -1"),
    ('[[node]]\nname = "a"\ncpus = 1\ndriver = true\nlatency_us = 1\nlatency_ms = 1\n', r"latency given twice"),
    ('name = "x"\n', r"has no node"),
])
def test_bad_cluster_specs_are_refused(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(SpecError, match=match):
        ClusterSpec.load(f)


def test_pearl_plan_places_the_actors_of_a_cluster_spec():
    from pearl_core.cli import app

    args = ["plan", "-H", str(THIS_MACHINE), "-b", "64", "--hidden", "64,64", "--cluster", str(EXAMPLE)]
    res = CliRunner().invoke(app, [*args, "--ray-actors", "12"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "replay and learner on the driver's node head" in out
    # the driver's node first (local link), then worker-1 fills before worker-2 (spec order on a tie)
    assert "head: 1 actor(s)" in out and "worker-1: 8 actor(s)" in out and "worker-2: 3 actor(s)" in out
    assert "env steps/s" in out
    bad = CliRunner().invoke(app, [*args, "--ray-actors", "40"])
    assert bad.exit_code == 2 and "room for 17 actors" in " ".join(bad.output.split())
    lone = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--ray-actors", "2"])
    assert lone.exit_code == 2 and "no --ray or --cluster" in lone.output


def test_an_unreachable_cluster_is_a_clear_error_and_nothing_is_written(monkeypatch, tmp_path):
    ray = pytest.importorskip("ray", reason="needs the extra: pip install 'pearl-core[ray]'")
    from pearl_core.cli import app
    from pearl_core.runtime.config import RunConfig
    from pearl_core.runtime.rayrun import RayRuntime

    def refuse(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    match = r"cannot connect to the Ray cluster at '10.0.0.9:6379': ConnectionError.*ray start --head"
    with pytest.raises(SpecError, match=match):
        ClusterSpec.from_ray("10.0.0.9:6379")
    res = CliRunner().invoke(app, ["plan", "-H", str(THIS_MACHINE), "--ray", "10.0.0.9:6379"])
    assert res.exit_code == 2 and "cannot connect to the Ray cluster" in " ".join(res.output.split())
    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", log_dir=str(tmp_path / "run"))
    rt = RayRuntime(cfg, address="10.0.0.9:6379", progress=False, plot=False, tensorboard=False)
    with pytest.raises(SpecError, match=match):
        rt.run()
    assert not (tmp_path / "run").exists()
