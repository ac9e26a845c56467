"""The Ray runtime on a local multi-node cluster that the tests start themselves
(``ray.cluster_utils.Cluster``: a head node and two worker nodes on this machine).

Checked: actors run on both worker nodes (where each ran is recorded), the learner's
priorities flow back, one actor stores exactly the serial oracle's rows, a lost actor
process and a lost worker node are survived (actors restarted elsewhere, nothing
inserted lost), an actor whose code raises ends the run with an error and a checkpoint,
Ctrl-C stops cleanly with a checkpoint, no Ray actor outlives a run, and without Ray the
runtime says how to install it. No assertion depends on wall-clock time.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from pearl_core.errors import ActorError, SpecError
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import RunConfig, RuntimePlan
from conftest import HELPERS, HERE
from test_parallel import assert_replays_the_serial_run, config, owed, run_serial  # its tiny runs

ray = pytest.importorskip("ray", reason="the Ray runtime's tests need the extra: pip install 'pearl-core[ray]'")

from pearl_core.runtime.rayrun import RayRuntime  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(HERE)  # the repository (conftest's HERE is tests/)
# The worker processes import the trainers of tests/helpers/runtime_support.py.
_PATH = os.pathsep.join([HELPERS, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
RUNTIME_ENV = {"env_vars": {"PYTHONPATH": _PATH}}
def ray_runtime(cfg, plan, **kw) -> RayRuntime:
    return RayRuntime(cfg, plan, progress=False, plot=False, tensorboard=False, runtime_env=RUNTIME_ENV,
                      stall_timeout_s=120, **kw)


def start_cluster():
    from ray.cluster_utils import Cluster

    # The head holds no CPU for actors: the actors must go to the two worker nodes.
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [c.add_node(num_cpus=2) for _ in range(2)]
    ray.init(address=c.address, logging_level="ERROR")
    c.wait_for_nodes()
    return c, workers


def stop_cluster(c) -> None:
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def cluster():
    c, workers = start_cluster()
    try:
        yield c, [w.node_id for w in workers]  # a test that loses a node puts a fresh one's id in its place
    finally:
        stop_cluster(c)


def all_cpus_free(deadline_s: float = 60.0) -> bool:
    """Whether every CPU of the cluster is free again (no actor of the run holds one), waiting for
    Ray to settle the kills up to ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        if ray.available_resources().get("CPU", 0.0) == ray.cluster_resources().get("CPU", -1.0):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.2)


def when_steps(rt: RayRuntime, steps: int, action) -> threading.Thread:
    """Run ``action()`` once the run has counted ``steps`` env steps (from a watcher thread)."""
    def watch():
        while rt.live_state is None or rt.live_state.env_steps < steps:
            time.sleep(0.01)
        action()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


# --------------------------------------------------------------------------- placement and PER


def test_actors_on_both_worker_nodes_priorities_flow_back_and_nothing_outlives(cluster, tmp_path):
    """PEARL's DQN (a small MLP) on CartPole with one actor on each worker node."""
    _, workers = cluster
    plan = RuntimePlan(n_actors=2, envs_per_actor=2, insert_batch=16)
    cfg = config(tmp_path, trainer="pearl_core.algorithms:DQN", steps=1024, trainer_kwargs={"hidden_sizes": [16, 16]})
    rt = ray_runtime(cfg, plan)
    res = rt.run()
    assert res.env_steps == 1024 and res.updates == owed(1024) and res.stop_reason == "max_env_steps"
    # Where each actor ran: one on each worker node (the head has no CPU for them).
    first = {nodes[0] for nodes in rt.actor_nodes.values()}
    assert first == set(workers), rt.actor_nodes
    assert rt.actor_restarts == 0
    ck = load_checkpoint(res.checkpoint_path)
    assert ck.extra["runtime"] == "ray"
    rep = ck.replay
    assert rep["size"] == 1024  # every counted env step is in the replay
    prio = np.asarray(rep["priorities"])[:1024]
    assert int(rep["sample_steps"]) == res.updates
    assert np.unique(prio).size > 50 and (prio < 1.0).sum() > 50  # the learner's |TD| came back
    assert all_cpus_free(), ray.available_resources()


def test_the_cluster_model_reads_the_running_cluster(cluster):
    from pearl_core.composer.cluster import LOCAL_LINK, ClusterSpec

    c = ClusterSpec.from_ray()  # the cluster this process is connected to
    assert len(c.nodes) == 3 and sorted(n.cpus for n in c.nodes) == [0, 2, 2]
    assert c.driver.cpus == 0  # the driver is on the head node, which has no CPU for actors
    assert all((n.latency_s, n.bandwidth_Bps) == LOCAL_LINK for n in c.nodes)  # one host
    m = ClusterSpec.from_ray(measure=True)  # each node's link measured by a task pinned there
    assert m.source.endswith("(links measured)") and [n.name for n in m.nodes] == [n.name for n in c.nodes]
    for n in m.nodes:
        assert 1e-6 <= n.latency_s < 1.0 and 1e6 < n.bandwidth_Bps < 1e12, n
    assert ray.available_resources().get("CPU") == ray.cluster_resources().get("CPU")  # the tasks held none


def test_a_cluster_spec_gives_the_running_nodes_their_links(cluster, tmp_path):
    """`pearl plan --ray ADDRESS --cluster SPEC`: the running cluster's nodes, their links from the spec
    (by their host's address: on this one-host cluster every node but the driver's gets it)."""
    from typer.testing import CliRunner

    from pearl_core.cli import app

    c, _ = cluster
    address = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    assert len(address) == 1
    spec = tmp_path / "lab.toml"
    spec.write_text('[[node]]\nname = "me"\ncpus = 1\ndriver = true\n[[node]]\nname = "slow"\ncpus = 1\n'
                    f'latency_us = 2000\nbandwidth_MBps = 50\naddress = "{address.pop()}"\n')
    this_machine = os.path.join(ROOT, "examples", "hardware", "this-machine.toml")
    args = ["plan", "-H", this_machine, "-b", "64", "--hidden", "32,32", "--ray", c.address, "--ray-actors", "3"]
    res = CliRunner().invoke(app, [*args, "--cluster", str(spec)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert f"links from {spec}" in out and out.count("link 2000 us / 0.05 GB/s") == 2, out[-2000:]
    both = CliRunner().invoke(app, [*args, "--cluster", str(spec), "--measure-links"])
    assert both.exit_code == 2 and "both give the nodes' links" in both.output


def test_actors_pinned_to_the_nodes_named(cluster, tmp_path):
    _, workers = cluster
    plan = RuntimePlan(n_actors=2, envs_per_actor=1, insert_batch=8)
    rt = ray_runtime(config(tmp_path, steps=256), plan, nodes=[workers[1]])
    res = rt.run()
    assert res.env_steps == 256
    assert [nodes[0] for _, nodes in sorted(rt.actor_nodes.items())] == [workers[1], workers[1]]
    assert all_cpus_free()


# --------------------------------------------------------------------------- serial oracle


def test_one_actor_agrees_with_the_serial_oracle(cluster, tmp_path):
    """One actor with a deterministic policy replays the serial run exactly: same rows, same counters."""
    plan = RuntimePlan(n_actors=1, envs_per_actor=2, insert_batch=16)
    trainer = "runtime_support:FixedPolicy"
    ser = run_serial(config(tmp_path, "serial", trainer), plan)
    par = ray_runtime(config(tmp_path, "ray", trainer), plan).run()
    assert_replays_the_serial_run(ser, par, tmp_path, "ray", ("env_steps", "return"))


# --------------------------------------------------------------------------- faults


def test_a_lost_actor_process_is_restarted_and_nothing_inserted_is_lost(cluster, tmp_path, caplog):
    marker = tmp_path / "killed"
    cfg = config(tmp_path, trainer="runtime_support:KillOnce", steps=768)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "trainer_kwargs": {"kill_at": 200, "marker": str(marker)}})
    plan = RuntimePlan(n_actors=2, envs_per_actor=1, insert_batch=8)
    rt = ray_runtime(cfg, plan)
    with caplog.at_level("WARNING", logger="pearl_core.runtime.rayrun"):
        res = rt.run()
    assert marker.exists()  # one actor did SIGKILL itself
    assert rt.actor_restarts == 1
    assert any("was lost" in r.getMessage() and "restart 1 of at most 3" in r.getMessage() for r in caplog.records)
    assert res.env_steps == 768 and res.updates == owed(768)
    assert load_checkpoint(res.checkpoint_path).replay["size"] == 768
    assert all_cpus_free()


def test_an_actor_that_raises_ends_the_run_with_an_error_and_a_checkpoint(cluster, tmp_path):
    cfg = config(tmp_path, trainer="runtime_support:RaisingActor", steps=2048)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "trainer_kwargs": {"raise_at": 300}})
    rt = ray_runtime(cfg, RuntimePlan(n_actors=1, envs_per_actor=2, insert_batch=16))
    with pytest.raises(ActorError, match=r"Ray actor 0 \(on node [0-9a-f]+\) failed .*actor exploded"):
        rt.run()
    ck = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ck.state.env_steps >= 256 and ck.replay["size"] == ck.state.env_steps  # what arrived was kept
    assert rt.actor_restarts == 0  # code that raises is not restarted
    assert all_cpus_free()


def test_ctrl_c_stops_cleanly_with_a_checkpoint(cluster, tmp_path):
    rt = ray_runtime(config(tmp_path, steps=100_000), RuntimePlan(n_actors=2, envs_per_actor=1, insert_batch=8))
    when_steps(rt, 300, lambda: os.kill(os.getpid(), signal.SIGINT))
    res = rt.run()
    assert res.stop_reason == "interrupted"
    assert 300 <= res.env_steps < 100_000
    ck = load_checkpoint(res.checkpoint_path)
    assert ck.replay["size"] == res.env_steps
    assert all_cpus_free()


# --------------------------------------------------------------------------- the host on another node


def test_the_host_runs_on_the_node_named_and_ctrl_c_reaches_it(cluster, tmp_path):
    """host_node: the replay and learner run in a Ray actor on that worker node (not in this process);
    Ctrl-C here stops it there with its final checkpoint; its actors go with it."""
    _, workers = cluster
    rt = ray_runtime(config(tmp_path, steps=100_000), RuntimePlan(n_actors=2, envs_per_actor=1, insert_batch=8),
                     host_node=workers[1])
    when_steps(rt, 300, lambda: os.kill(os.getpid(), signal.SIGINT))  # live_state: the host's counters
    res = rt.run()
    assert rt.host_node_ran == workers[1] and ray.get_runtime_context().get_node_id() != workers[1]
    assert res.stop_reason == "interrupted" and 300 <= res.env_steps < 100_000
    assert res.updates > 0  # the learner trained there
    assert {nodes[0] for nodes in rt.actor_nodes.values()} <= set(workers) and len(rt.actor_nodes) == 2
    ck = load_checkpoint(res.checkpoint_path)  # this machine's disk is the host node's too
    assert ck.extra["runtime"] == "ray" and ck.replay["size"] == res.env_steps
    assert all_cpus_free()


def test_an_error_on_the_host_node_comes_back_as_itself(cluster, tmp_path):
    _, workers = cluster
    cfg = config(tmp_path, trainer="runtime_support:RaisingActor", steps=2048)
    cfg = RunConfig.from_dict({**cfg.to_dict(), "trainer_kwargs": {"raise_at": 300}})
    rt = ray_runtime(cfg, RuntimePlan(n_actors=1, envs_per_actor=2, insert_batch=16), host_node=workers[0])
    with pytest.raises(ActorError, match=r"Ray actor 0 \(on node [0-9a-f]+\) failed .*actor exploded"):
        rt.run()
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt").replay["size"] >= 256
    with pytest.raises(SpecError, match=r"host_node = 'f+' is not an alive node"):
        ray_runtime(config(tmp_path, "other"), RuntimePlan(), host_node="f" * 56).run()
    assert not (tmp_path / "other").exists()
    assert all_cpus_free()


def test_a_lost_host_node_ends_the_run_with_a_host_error(cluster, tmp_path):
    """The replay and learner cannot move: losing their node is a HostError naming it; the host's actors go
    with it. (A fresh worker node replaces the lost one afterwards.)"""
    from pearl_core.errors import HostError

    c, workers = cluster
    rt = ray_runtime(config(tmp_path, steps=100_000), RuntimePlan(n_actors=2, envs_per_actor=1, insert_batch=8),
                     host_node=workers[0])
    doomed = next(n for n in c.worker_nodes if n.node_id == workers[0])
    when_steps(rt, 300, lambda: c.remove_node(doomed))
    try:
        with pytest.raises(HostError, match=rf"on node {workers[0]} was lost .* resume"):
            rt.run()
    finally:
        workers[0] = c.add_node(num_cpus=2).node_id
        c.wait_for_nodes()
    assert all_cpus_free()


def test_the_composed_program_runs_its_actors_on_the_cluster(cluster, tmp_path):
    """The README's two commands: compose a program from a hardware spec, run it with --ray ADDRESS."""
    import json
    import subprocess

    from typer.testing import CliRunner

    from pearl_core.cli import app

    c, workers = cluster
    spec = os.path.join(ROOT, "examples", "hardware", "this-machine.toml")
    made = CliRunner().invoke(app, ["compose", "-H", spec, "--no-profile", "--hidden", "32,32", "-o",
                                    str(tmp_path / "runtime.py")])
    assert made.exit_code == 0, made.output
    for wrong, why in ((["--measure-links"], "no --ray ADDRESS"),
                       (["--ray", c.address, "--measure-links", "--cluster", "lab.toml"],
                        "both give the nodes' links")):
        lone = subprocess.run([sys.executable, "runtime.py", *wrong], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert lone.returncode == 2 and why in lone.stderr, lone.stderr[-2000:]
    # the nodes' links from a cluster spec (every node of this one-host cluster is at one address)
    address = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}.pop()
    (tmp_path / "lab.toml").write_text('[[node]]\nname = "me"\ncpus = 1\ndriver = true\n[[node]]\nname = "lan"\n'
                                       f'cpus = 1\nlatency_us = 300\nbandwidth_GBps = 1\naddress = "{address}"\n')
    out = subprocess.run([sys.executable, "runtime.py", "--ray", c.address, "--cluster", "lab.toml",
                          "--ray-actors", "2", "--max-env-steps", "300", "--log-dir", "run"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "links from lab.toml" in out.stdout and "link 300 us / 1 GB/s" in out.stdout, out.stdout[-3000:]
    assert "stopped by max_env_steps" in out.stdout
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["env_steps"] == 300
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt").extra["runtime"] == "ray"
    assert all_cpus_free()


def test_a_lost_worker_node_is_survived(cluster, tmp_path):
    """Killing one worker node mid-run: its actor restarts on the other node; the run goes on to its
    budget and the replay holds every env step counted. (The last test on the module's cluster: a
    fresh worker node replaces the lost one afterwards.)"""
    c, workers = cluster
    plan = RuntimePlan(n_actors=2, envs_per_actor=1, insert_batch=8)
    rt = ray_runtime(config(tmp_path, steps=1536), plan)
    doomed = next(n for n in c.worker_nodes if n.node_id == workers[0])
    when_steps(rt, 400, lambda: c.remove_node(doomed))
    try:
        res = rt.run()
    finally:
        workers[0] = c.add_node(num_cpus=2).node_id
        c.wait_for_nodes()
    assert res.env_steps == 1536 and res.updates == owed(1536)
    assert rt.actor_restarts >= 1
    lost = [i for i, nodes in rt.actor_nodes.items() if nodes[0] == doomed.node_id]
    assert len(lost) == 1
    # The restarted actor ran on the surviving worker node.
    assert rt.actor_nodes[lost[0]][-1] == workers[1], rt.actor_nodes
    assert load_checkpoint(res.checkpoint_path).replay["size"] == 1536
    assert all_cpus_free()


# --------------------------------------------------------------------------- without Ray


def test_without_ray_the_runtime_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    rt = RayRuntime(config(tmp_path), RuntimePlan(), progress=False, plot=False, tensorboard=False)
    with pytest.raises(SpecError, match=r"pip install 'pearl-core\[ray\]'"):
        rt.run()
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_bad_arguments_are_refused(tmp_path):
    cfg = config(tmp_path)
    for kw, what in (({"address": ""}, "address"), ({"nodes": []}, "nodes"), ({"nodes": "abc"}, "nodes"),
                     ({"actor_cpus": 0}, "actor_cpus"), ({"max_actor_restarts": -1}, "max_actor_restarts"),
                     ({"runtime_env": "x"}, "runtime_env"), ({"stall_timeout_s": float("nan")}, "stall_timeout_s"),
                     ({"host_node": ""}, "host_node"), ({"host_node": "n", "host_gpus": -1}, "host_gpus"),
                     ({"host_gpus": 1}, "without host_node"), ({"host_node": "n", "host_cpus": 0}, "host_cpus")):
        with pytest.raises(SpecError, match=what):
            RayRuntime(cfg, RuntimePlan(), **kw)
