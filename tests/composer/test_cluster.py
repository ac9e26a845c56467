"""The cluster model (pearl_core/composer/cluster.py): cluster specs, where the actors of a Ray run
go, and `pearl plan --cluster`. (Reading a running cluster is tested in tests/runtime/test_rayrun_cluster.py.)"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl_core.composer.cluster import LOCAL_LINK, RPC_S, ClusterSpec, NodeSpec, place_actors, place_host
from pearl_core.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "hardware" / "ray-cluster.toml"
THIS_MACHINE = ROOT / "examples" / "hardware" / "this-machine.toml"
CPU_GPU_FPGA = ROOT / "examples" / "hardware" / "cpu-gpu-fpga.toml"

# A workload where one actor call (32 experiences) costs 32 x 50 us of acting.
KW = dict(actor_step_s=50e-6, replay_ratio=0.5, experience_bytes=40, weight_bytes=280_000, insert_batch=32)


def cluster(*workers: tuple[str, float, float, float], driver_cpus: float = 2) -> ClusterSpec:
    nodes = [NodeSpec("head", driver_cpus, driver=True)]
    nodes += [NodeSpec(name, cpus, lat, bw) for name, cpus, lat, bw in workers]
    return ClusterSpec(tuple(nodes))


def test_the_example_spec_loads_in_si_units():
    c = ClusterSpec.load(EXAMPLE)
    assert [n.name for n in c.nodes] == ["head", "worker-1", "gpu-box"] and c.driver.name == "head"
    assert [n.devices for n in c.nodes] == [(), (), ("h100",)]
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
    ('[[node]]\nname = "a"\ncpus = 1\ndriver = true\ndevices = "h100"\n', r"devices = 'h100'; expected a list"),
    ('name = "x"\n', r"has no node"),
])
def test_bad_cluster_specs_are_refused(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(SpecError, match=match):
        ClusterSpec.load(f)


XEON, H100, AGILEX = ({"name": "xeon", "kind": "cpu"}, {"name": "h100", "kind": "cuda"},
                      {"name": "agilex", "kind": "fpga"})


def test_the_host_goes_to_the_node_with_the_plans_devices():
    c = ClusterSpec((NodeSpec("head", 2, driver=True), NodeSpec("w", 8, 1e-4, 1e9),
                     NodeSpec("gpu", 8, 1e-4, 1e9, devices=("h100",)),
                     NodeSpec("any-gpu", 8, 1e-4, 1e9, devices=("cuda",))))
    assert place_host(c, [XEON, XEON, XEON]).name == "head"  # a CPU plan stays on the driver's node
    assert place_host(c, [XEON, H100, XEON]).name == "gpu"  # the first node with the learner's device
    kinds = ClusterSpec((NodeSpec("head", 2, driver=True), NodeSpec("g", 8, 1e-4, 1e9, devices=("cuda",))))
    assert place_host(kinds, [XEON, H100, H100]).name == "g"  # by kind, as a Ray node with GPUs is read
    with_gpu = ClusterSpec((NodeSpec("head", 2, driver=True, devices=("h100",)), NodeSpec("gpu", 8, 1e-4, 1e9,
                                                                                      devices=("h100",))))
    assert place_host(with_gpu, [XEON, H100, XEON]).name == "head"  # the driver's node first when it has them
    with pytest.raises(SpecError, match=r"no node .* has the plan's devices \['agilex \(fpga\)', 'h100 \(cuda\)'\]"):
        place_host(c, [AGILEX, H100, XEON])


def test_actors_are_costed_by_their_link_to_the_host_node():
    c = ClusterSpec((NodeSpec("head", 2, driver=True), NodeSpec("gpu", 3, 1e-3, 1e6, devices=("h100",)),
                     NodeSpec("w", 4, 2e-3, 1e8)))
    p = place_actors(c, iteration_s=1e-3, n_actors=8, host="gpu", host_gpus=1, **KW)
    acting = 32 * 50e-6

    def call(lat, bw):
        return acting + RPC_S + lat + 32 * 40 / bw + (RPC_S + lat + 280_000 / bw) * min(1.0, 32 * 0.5 / 10)

    assert p.call_s["gpu"] == pytest.approx(call(*LOCAL_LINK))  # on the host node itself: local
    assert p.call_s["head"] == pytest.approx(call(1e-3, 1e6))  # the driver reaches it over the host's link
    assert p.call_s["w"] == pytest.approx(call(2e-3, 1e6))  # two other nodes: the slower of the two links
    # the host node keeps one CPU for the learner, the driver's node none: 2 + 2 + 4 slots
    assert p.actors == (("gpu", 2), ("head", 2), ("w", 4))
    assert p.host == "gpu" and not p.on_driver
    assert p.runtime_kwargs() == {"nodes": p.nodes(), "host_node": "gpu", "host_gpus": 1.0}
    on_driver = place_actors(c, iteration_s=1e-3, n_actors=2, **KW)
    assert on_driver.host == "head" and on_driver.runtime_kwargs() == {"nodes": on_driver.nodes()}
    with pytest.raises(SpecError, match="host = 'nowhere' is not a node"):
        place_actors(c, iteration_s=1e-3, host="nowhere", **KW)


def test_a_running_clusters_gpus_and_resources_are_its_devices(monkeypatch):
    import pearl_core.runtime.rayrun as rayrun

    class FakeRay:
        def is_initialized(self):
            return True

        def get_runtime_context(self):
            return type("Ctx", (), {"get_node_id": lambda self: "n0"})()

        def nodes(self):
            return [{"NodeID": "n0", "Alive": True, "NodeManagerAddress": "10.0.0.1",
                     "Resources": {"CPU": 4.0, "memory": 1e9, "node:10.0.0.1": 1.0, "node:__internal_head__": 1.0}},
                    {"NodeID": "n1", "Alive": True, "NodeManagerAddress": "10.0.0.2",
                     "Resources": {"CPU": 16.0, "GPU": 2.0, "accelerator_type:H100": 1.0, "object_store_memory": 1e9}},
                    {"NodeID": "n2", "Alive": True, "NodeManagerAddress": "10.0.0.3",
                     "Resources": {"CPU": 8.0, "fpga": 1.0}},
                    {"NodeID": "n3", "Alive": False, "NodeManagerAddress": "10.0.0.4", "Resources": {"CPU": 8.0}}]

    monkeypatch.setattr(rayrun, "import_ray", lambda: FakeRay())
    c = ClusterSpec.from_ray()
    assert [(n.name, n.cpus, n.devices, n.driver) for n in c.nodes] == [
        ("n0", 4.0, (), True), ("n1", 16.0, ("cuda",), False), ("n2", 8.0, ("fpga",), False)]
    assert place_host(c, [XEON, H100, XEON]).name == "n1" and place_host(c, [AGILEX, XEON, XEON]).name == "n2"


def test_pearl_plan_puts_a_gpu_plans_host_on_the_gpu_node(monkeypatch):
    import pearl_core.composer.profiling as profiling
    from pearl_core.cli import app

    # The actors' time per experience is measured here unless profiled: fixed, so the count does not
    # depend on this machine's speed (60 us: one actor delivers 11.7k env steps/s, two 23.5k, the
    # learner uses 18.7k).
    monkeypatch.setattr(profiling, "profile_actor_step", lambda wl, iterations=200: 60e-6)
    res = CliRunner().invoke(app, ["plan", "-H", str(CPU_GPU_FPGA), "-b", "512", "--hidden", "256,256",
                                   "--cluster", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "replay and learner on node gpu-box (not the driver's: the program runs them there as a Ray actor " \
           "with 1 GPU(s))" in out
    assert "gpu-box: 2 actor(s)" in out and "(host)" in out


def test_pearl_plan_places_the_actors_of_a_cluster_spec():
    from pearl_core.cli import app

    args = ["plan", "-H", str(THIS_MACHINE), "-b", "64", "--hidden", "64,64", "--cluster", str(EXAMPLE)]
    res = CliRunner().invoke(app, [*args, "--ray-actors", "12"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "replay and learner on the driver's node head" in out
    # the driver's node first (local link), then worker-1 fills before worker-2 (spec order on a tie)
    assert "head: 1 actor(s)" in out and "worker-1: 8 actor(s)" in out and "gpu-box: 3 actor(s)" in out
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


def running(*nodes: tuple[str, float, str], driver: str = "n0") -> ClusterSpec:
    """A cluster as ClusterSpec.from_ray reads it: Ray node ids, CPUs, host addresses; local links."""
    return ClusterSpec(tuple(NodeSpec(name, cpus, driver=name == driver, address=addr) for name, cpus, addr in nodes),
                       name="ray", source="ray cluster auto")


def test_a_spec_gives_the_running_nodes_their_links_by_address(tmp_path):
    live = running(("n0", 0, "10.0.0.1"), ("n1", 4, "10.0.0.1"), ("n2", 8, "10.0.0.2"), ("n3", 8, "10.0.0.2"))
    spec = tmp_path / "c.toml"
    spec.write_text('[[node]]\nname = "me"\ncpus = 1\ndriver = true\n'
                    '[[node]]\nname = "rack"\ncpus = 1\nlatency_us = 2000\nbandwidth_MBps = 50\naddress = "10.0.0.2"\n'
                    '[[node]]\nname = "spare"\ncpus = 1\nlatency_us = 300\nbandwidth_GBps = 1\naddress = "10.0.0.9"\n')
    c = live.with_links_from(ClusterSpec.load(spec))
    links = {n.name: (n.cpus, n.latency_s, n.bandwidth_Bps, n.driver) for n in c.nodes}
    # the driver and the node on its host keep the local link; both nodes at 10.0.0.2 get the spec's
    assert links == {"n0": (0, *LOCAL_LINK, True), "n1": (4, *LOCAL_LINK, False),
                     "n2": (8, pytest.approx(2e-3), pytest.approx(50e6), False),
                     "n3": (8, pytest.approx(2e-3), pytest.approx(50e6), False)}
    assert c.source == f"ray cluster auto, links from {spec} (not running: spare (10.0.0.9))"
    # the spec's links decide the placement: the slow host's nodes come last
    p = place_actors(c, iteration_s=1e-3, n_actors=6, reserve=0, **KW)
    assert p.actors == (("n1", 4), ("n2", 2))


def test_a_spec_that_cannot_give_every_remote_node_its_link_is_refused(tmp_path):
    live = running(("n0", 0, "10.0.0.1"), ("n1", 8, "10.0.0.2"), ("n2", 8, "10.0.0.3"))

    def spec(text: str) -> ClusterSpec:
        return ClusterSpec.from_dict(tomllib.loads('[[node]]\nname = "me"\ndriver = true\n' + text),
                                     source="c.toml")

    one = '[[node]]\nname = "a"\ncpus = 1\nlatency_us = 100\nbandwidth_GBps = 1\naddress = "10.0.0.2"\n'
    with pytest.raises(SpecError, match=r"no node with address '10.0.0.3', where the running cluster has node n2 "
                                        r"\(8 CPUs\)\. Fix: add a \[\[node\]\] with address = \"10.0.0.3\""):
        live.with_links_from(spec(one))
    with pytest.raises(SpecError, match=r"nodes 'a' and 'b' both have address '10.0.0.2'"):
        live.with_links_from(spec(one + one.replace('"a"', '"b"')))
    with pytest.raises(SpecError, match=r"node 'c': no address; .* Fix: add address ="):
        live.with_links_from(spec('[[node]]\nname = "c"\ncpus = 1\nlatency_us = 100\nbandwidth_GBps = 1\n'))
