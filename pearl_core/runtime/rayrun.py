"""The Ray runtime: PEARL's protocol with the actors on a Ray cluster's nodes.

Optional: it needs Ray (``pip install "pearl-core[ray]"``); without it the rest of PEARL
is untouched and building this runtime's run raises a :class:`SpecError` saying how to
install it. The host runtime, the replay manager (sum tree and Data Storage) and the
learner run in one process exactly as the serial runtime (the oracle) runs them: the
driver process, on the node the script runs on, or (``host_node=...``) a Ray actor
pinned to the node the plan names (:class:`RayHostBody`: the node with the plan's
learner device, e.g. the GPU box; ``host_gpus`` GPUs reserved there for the learner),
while the driver waits for its result and forwards Ctrl-C. The actors are Ray actors
(:class:`~pearl_core.runtime.rayactor.RayActorBody`), spread over the cluster's nodes
(or pinned to the nodes named)::

    connect: ray.init(address=...) (or a local Ray when none is given and none is running)
    start n_actors Ray actors (num_cpus=actor_cpus each; SPREAD, or NodeAffinity per actor)
    publish the learner's weights: ref = ray.put(weights)            # by reference, once
    loop until a stop criterion fires (or Ctrl-C):
        every idle actor: collect.remote([ref], version, env_steps, k)   # k steps of its envs, one batch back
        take the batches ready: insert them (batched, at the running max priority); record episodes
        the learner's updates owed (the replay ratio), each with its priority update
        every weight_sync_every updates: publish fresh weights (a new ref)
        evaluate / log / checkpoint when due

One call of an actor is ``k = ceil(insert_batch / envs_per_actor)`` steps of its
environments: experience moves in batches through Ray's object store, never one RPC per
transition. Each actor has at most one call in flight, so actors run at most one batch
ahead of the learner (the bounded slack), act with weights at most one publication plus
one call old (the bounded staleness), and a call never takes the run past
``max_env_steps``. One actor with a deterministic policy stores exactly the serial
runtime's rows (tests/runtime/test_rayrun_cluster.py).

Faults: an actor whose process or node is lost (``RayActorError``) is restarted
elsewhere with fresh seeds, at most ``max_actor_restarts`` times per actor (each logged
by logger ``pearl_core.runtime.rayrun`` and counted in :attr:`RayRuntime.actor_restarts`);
the batch it was collecting had not been inserted, and everything inserted stays in the
replay. An environment or ``get_action`` that raises ends the run with
:class:`ActorError` (or the :class:`DataError` of a NaN/inf) after a checkpoint, as in
the serial runtime. Ctrl-C (SIGINT), SIGTERM or SIGHUP stops the run cleanly with the final
checkpoint (``stop_reason="interrupted"``). However the run ends, its Ray actors are
killed, and a Ray this runtime started is shut down.

As in the parallel runtime, the n-step windows still open in the actors when the run
stops (at most ``n - 1`` steps per environment) are not shipped.

With ``host_node`` the run's files (logs, checkpoints, the curve) are written on that
node, under ``config.log_dir`` (give a directory every node sees, or fetch them from
there); a host node lost mid-run ends the run with :class:`HostError` (the plan cannot
continue without its replay and learner), and the last checkpoint there resumes it.

Usage::

    rt = RayRuntime(config, RuntimePlan(n_actors=4, envs_per_actor=8), address="auto")
    result = rt.run()
    rt.actor_nodes        # {actor: [node ids it ran on, in order]}
    rt.host_node_ran      # the node id the replay and learner ran on
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from typing import Any, Mapping, Sequence

from pearl_core.errors import ActorError, DataError, HostError, PearlError, SpecError, StallError
from pearl_core.runtime.procs import install_stop_handlers, restore_stop_handlers
from pearl_core.runtime.rayactor import RayActorBody
from pearl_core.runtime.rayconnect import CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S, RAY_INSTALL, connect_ray, \
    connect_timeout, import_ray
from pearl_core.runtime.serial import SerialRuntime, _Run

log = logging.getLogger("pearl_core.runtime.rayrun")

__all__ = ["CONNECT_TIMEOUT_ENV", "CONNECT_TIMEOUT_S", "RAY_INSTALL", "RayHostBody", "RayRuntime", "connect_ray",
           "connect_timeout", "import_ray"]

#: Seconds one wait for actor batches lasts before the loop checks its stop criteria again.
WAIT_S = 0.25


def _positive(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise SpecError(f"{owner}: {name} = {value!r}; expected a finite number > 0.")
    return float(value)


class RayRuntime(SerialRuntime):
    """Train with the actors on a Ray cluster; returns a :class:`~pearl_core.runtime.control.RunResult`.

    Takes the arguments of :class:`~pearl_core.runtime.session.Runtime`, and:

    Args:
        address: the cluster to join (``ray.init(address=...)``: ``"auto"``, ``"ray://host:10001"``,
            ``"host:6379"``); ``None`` (default): the Ray this process is already connected to, or
            else a local one that the run starts and shuts down.
        nodes: Ray node ids to place the actors on, actor ``i`` on ``nodes[i % len(nodes)]``
            (soft affinity: a lost node's actor restarts elsewhere); ``None`` (default): spread
            over the cluster's nodes.
        actor_cpus: CPUs each actor reserves (Ray's ``num_cpus``).
        max_actor_restarts: restarts allowed per actor after its process or node is lost.
        runtime_env: Ray's ``runtime_env`` of the actors (e.g. ``{"working_dir": "."}`` or
            ``{"env_vars": {"PYTHONPATH": ...}}`` so that workers import the trainer's module).
        stall_timeout_s: seconds without a batch from any actor before the run ends with
            :class:`StallError` (e.g. no node has room for an actor, or an env is frozen).
        host_node: the Ray node id to run the host loop, the replay manager and the learner
            on (a Ray actor pinned there; see the module); ``None`` (default): this process.
        host_cpus, host_gpus: what that host actor reserves (Ray's ``num_cpus`` / ``num_gpus``;
            give ``host_gpus=1`` for a learner on a GPU there). Only with ``host_node``.
        connect_timeout_s: seconds connecting to ``address`` may take before the run fails with a
            :class:`SpecError` naming it (``None``: ``$PEARL_RAY_CONNECT_TIMEOUT_S``, else 30).

    Attributes:
        actor_nodes: ``{actor index: [Ray node ids, in the order it ran on them]}``.
        actor_restarts: actors restarted after a loss, over the run.
        host_node_ran: the node id the host loop, replay and learner ran on.

    Raises (from :meth:`run`): as :class:`SerialRuntime`, and :class:`SpecError` when Ray is
    not installed, or ``host_node`` is not an alive node; :class:`ActorError` when an actor
    cannot be built or is lost more than ``max_actor_restarts`` times; :class:`StallError`
    as above; :class:`HostError` when the host node is lost.
    """

    def __init__(self, config, plan=None, *, address: str | None = None, nodes: Sequence[str] | None = None,
                 actor_cpus: float = 1.0, max_actor_restarts: int = 3, runtime_env: Mapping[str, Any] | None = None,
                 stall_timeout_s: float = 300.0, host_node: str | None = None, host_cpus: float = 1.0,
                 host_gpus: float = 0.0, connect_timeout_s: float | None = None, **kwargs: Any):
        super().__init__(config, plan, **kwargs)
        me = type(self).__name__
        self.connect_timeout_s = connect_timeout(connect_timeout_s)
        if host_node is not None and (not isinstance(host_node, str) or not host_node):
            raise SpecError(f"{me}: host_node = {host_node!r}; expected None or a Ray node id "
                            "(ray.nodes()[i]['NodeID']).")
        if isinstance(host_gpus, bool) or not isinstance(host_gpus, (int, float)) or not (
                math.isfinite(host_gpus) and host_gpus >= 0):
            raise SpecError(f"{me}: host_gpus = {host_gpus!r}; expected a finite number >= 0.")
        if host_node is None and host_gpus:
            raise SpecError(f"{me}: host_gpus = {host_gpus!r} without host_node; GPUs are reserved for a host "
                            "actor only. Fix: give host_node=..., or leave host_gpus at 0.")
        if address is not None and (not isinstance(address, str) or not address):
            raise SpecError(f"{me}: address = {address!r}; expected None or a Ray address such as 'auto'.")
        if nodes is not None and (isinstance(nodes, str) or not nodes
                                  or not all(isinstance(n, str) and n for n in nodes)):
            raise SpecError(f"{me}: nodes = {nodes!r}; expected None or a non-empty list of Ray node ids "
                            "(ray.nodes()[i]['NodeID']).")
        if isinstance(max_actor_restarts, bool) or not isinstance(max_actor_restarts, int) or max_actor_restarts < 0:
            raise SpecError(f"{me}: max_actor_restarts = {max_actor_restarts!r}; expected an int >= 0.")
        if runtime_env is not None and not isinstance(runtime_env, Mapping):
            raise SpecError(f"{me}: runtime_env = {runtime_env!r}; expected None or a mapping (Ray's runtime_env).")
        self.address = address
        self.nodes = list(nodes) if nodes is not None else None
        self.actor_cpus = _positive(me, "actor_cpus", actor_cpus)
        self.max_actor_restarts = max_actor_restarts
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        self.stall_timeout_s = _positive(me, "stall_timeout_s", stall_timeout_s)
        self.host_node = host_node
        self.host_cpus = _positive(me, "host_cpus", host_cpus)
        self.host_gpus = float(host_gpus)
        self.host_node_ran: str | None = None
        # What a host actor builds its own RayRuntime from (host_node=None there).
        self._host_args = dict(kwargs, address=None, nodes=nodes, actor_cpus=actor_cpus,
                               max_actor_restarts=max_actor_restarts, runtime_env=runtime_env,
                               stall_timeout_s=stall_timeout_s)
        self.actor_nodes: dict[int, list[str]] = {}
        self.actor_restarts = 0
        #: the run's counters (:class:`~pearl_core.runtime.control.RunState`) once it has started
        self.live_state = None
        self.interrupted: str | None = None  # the signal that stops the run (install_stop_handlers)
        self.interrupted_at: float | None = None

    def run(self):
        """Train (see :class:`SerialRuntime`); with ``host_node``, in a Ray actor on that node."""
        if self.host_node is None:
            return super().run()
        return _run_on_host(self)

    def _open(self) -> "_RayRun":
        return _RayRun(self)


class RayHostBody:
    """The host of a Ray run on another node: a :class:`RayRuntime` (``host_node=None``) built and
    run inside a Ray actor pinned there, so the replay manager and the learner live on that node.
    Two calls may run at once (``max_concurrency=2``): :meth:`interrupt` and :meth:`state` while
    :meth:`run` runs."""

    def __init__(self, config, plan, kwargs: Mapping[str, Any]):
        self.rt = RayRuntime(config, plan, **kwargs)

    def run(self) -> tuple:
        import ray

        result = self.rt.run()
        return (result, self.rt.actor_nodes, self.rt.actor_restarts, self.rt.dropped_nonfinite,
                ray.get_runtime_context().get_node_id())

    def interrupt(self, signame: str) -> None:
        """Stop the run cleanly with its final checkpoint (the driver's Ctrl-C / SIGTERM / SIGHUP)."""
        if self.rt.interrupted_at is None:
            self.rt.interrupted_at = time.monotonic()
        self.rt.interrupted = signame

    def state(self):
        """The run's counters so far (``None`` before it starts)."""
        return self.rt.live_state


def _run_on_host(rt: RayRuntime):
    """Run ``rt`` in a :class:`RayHostBody` on ``rt.host_node``; wait, forwarding Ctrl-C; return its result."""
    ray = import_ray()
    owns = connect_ray(ray, rt.address, rt.connect_timeout_s)
    host = None
    handlers: dict = {}
    try:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if rt.host_node not in alive:
            raise SpecError(f"RayRuntime: host_node = {rt.host_node!r} is not an alive node of the cluster (alive: "
                            f"{sorted(alive)}). Fix: give one of those ids (ray.nodes()[i]['NodeID']), or leave "
                            "host_node=None to run the replay and learner in this process.")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts: dict[str, Any] = {"num_cpus": rt.host_cpus, "num_gpus": rt.host_gpus, "max_restarts": 0,
                                "max_task_retries": 0, "max_concurrency": 2,
                                "scheduling_strategy": NodeAffinitySchedulingStrategy(rt.host_node, soft=False)}
        if rt.runtime_env is not None:
            opts["runtime_env"] = rt.runtime_env
        host = ray.remote(RayHostBody).options(**opts).remote(rt.config, rt.plan, rt._host_args)
        ref = host.run.remote()
        handlers = install_stop_handlers(rt)
        forwarded = False
        while not ray.wait([ref], timeout=WAIT_S)[0]:
            if rt.interrupted is not None and not forwarded:
                host.interrupt.remote(rt.interrupted)
                forwarded = True
            try:
                rt.live_state = ray.get(host.state.remote(), timeout=WAIT_S)
            except ray.exceptions.GetTimeoutError:  # still starting; the next round asks again
                pass
            except ray.exceptions.RayError:  # lost: ray.get(ref) below says how
                pass
        try:
            result, rt.actor_nodes, rt.actor_restarts, rt.dropped_nonfinite, rt.host_node_ran = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the run raised there: the same error here
            cause = getattr(exc, "cause", None)
            if isinstance(cause, PearlError):
                raise cause from None
            raise HostError(f"the host of the Ray run on node {rt.host_node} failed: {_reason(exc)}.",
                            str(exc)) from exc
        except ray.exceptions.RayActorError as exc:
            raise HostError(f"the host of the Ray run (replay manager, learner) on node {rt.host_node} was lost "
                            f"({_reason(exc)}); the run cannot go on without them. Its last checkpoint is under "
                            f"{rt.config.log_dir!r} on that node. Fix: check the node (`ray status`), then resume "
                            "with RayRuntime.from_checkpoint(...).", str(exc)) from exc
        return result
    finally:
        restore_stop_handlers(handlers)
        if host is not None:  # its actors are owned by it: they go with it
            try:
                ray.kill(host, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if owns:
            ray.shutdown()


class _ActorPool:
    """The run's Ray actors: start, one call in flight each, batches taken, losses restarted."""

    def __init__(self, ray, rt: RayRuntime, offset: int):
        self.ray, self.rt = ray, rt
        self.cfg, self.plan = rt.config, rt.plan
        self.offset = offset
        n = self.plan.n_actors
        self.cls = ray.remote(RayActorBody)
        self.handles: list[Any] = [None] * n
        self.incarnation = [0] * n
        self.restarts = [0] * n
        self.dropped = [0] * n  # each actor incarnation's drop count, summed over incarnations below
        self.dropped_before = 0  # drops of incarnations lost
        self.last_drop = ""
        self.inflight: dict[Any, tuple[int, int]] = {}  # ref -> (actor, env steps asked)
        self.weights_ref = None
        self.version = 0
        self.last_batch_at = time.monotonic()

    # ----------------------------------------------------------------- start / stop
    def _strategy(self, i: int):
        if self.rt.nodes is None:
            return "SPREAD"
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(self.rt.nodes[i % len(self.rt.nodes)], soft=True)

    def _spawn(self, i: int) -> None:
        opts: dict[str, Any] = {"num_cpus": self.rt.actor_cpus, "max_restarts": 0, "max_task_retries": 0,
                                "scheduling_strategy": self._strategy(i)}
        if self.rt.runtime_env is not None:
            opts["runtime_env"] = self.rt.runtime_env
        self.handles[i] = self.cls.options(**opts).remote(
            self.cfg, i, self.incarnation[i], self.plan.n_actors, self.plan.envs_per_actor, self.offset,
            self.plan.vector_backend)
        self.dropped[i] = 0

    def start(self) -> tuple[Any, Any]:
        """Start every actor and wait until each is built; returns the environments' spaces."""
        ray = self.ray
        for i in range(len(self.handles)):
            self._spawn(i)
        try:
            spaces = ray.get([h.spaces.remote() for h in self.handles], timeout=self.rt.stall_timeout_s)
            wheres = ray.get([h.where.remote() for h in self.handles], timeout=self.rt.stall_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            raise ActorError(
                f"the Ray actors were not all started within {self.rt.stall_timeout_s:.0f} s: the cluster has no "
                f"room for {len(self.handles)} actors of {self.rt.actor_cpus:g} CPU(s) each "
                f"(ray.available_resources() = {ray.available_resources()}). Fix: lower RuntimePlan.n_actors or "
                "actor_cpus, or add nodes.") from exc
        except ray.exceptions.RayActorError as exc:
            if getattr(exc, "actor_init_failed", True):  # its __init__ raised (an import, the environment, ...)
                raise self._not_built(exc) from exc
            raise ActorError(f"a Ray actor's process died while building its environments and policy, before it "
                             f"was ready ({_died(exc)}): it was killed (a signal, the out-of-memory killer, a node "
                             "lost), not an import problem. Fix: check the node's memory and logs "
                             "(`ray logs`, dmesg), then run again.", traceback.format_exc()) from exc
        except ray.exceptions.RayError as exc:
            raise self._not_built(exc) from exc
        for i, (node, pid) in enumerate(wheres):
            self.rt.actor_nodes[i] = [node]
            log.info("Ray actor %d runs on node %s (pid %d)", i, node, pid)
        return spaces[0]

    def _not_built(self, exc) -> ActorError:
        return ActorError(f"a Ray actor could not be built: its constructor raised ({_reason(exc)}). Fix: make the "
                          f"environment {self.cfg.env_id!r} and the trainer {self.cfg.trainer!r} importable on every "
                          "node (install the packages there, or pass runtime_env=...).", traceback.format_exc())

    def close(self) -> None:
        """Kill every actor (nothing of the run outlives it) and drop the run's object references."""
        for h in self.handles:
            if h is not None:
                try:
                    self.ray.kill(h, no_restart=True)
                except Exception:  # noqa: BLE001 - already dead, or Ray is gone
                    pass
        self.handles = [None] * len(self.handles)
        self.inflight.clear()
        self.weights_ref = None

    # ----------------------------------------------------------------- calls
    def publish(self, weights: Mapping[str, Any]) -> None:
        """Put fresh weights in the object store; calls from now on carry their reference."""
        self.weights_ref = self.ray.put(dict(weights))
        self.version += 1

    def idle(self) -> list[int]:
        busy = {i for i, _ in self.inflight.values()}
        return [i for i in range(len(self.handles)) if i not in busy]

    def in_flight_steps(self) -> int:
        return sum(n for _, n in self.inflight.values())

    def submit(self, i: int, env_steps: int, n_steps: int) -> None:
        ref = self.handles[i].collect.remote([self.weights_ref], self.version, env_steps, n_steps)
        self.inflight[ref] = (i, n_steps * self.plan.envs_per_actor)

    def take(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        """The batches ready within ``timeout`` seconds (at least one, unless none came); lost actors
        are restarted (their call is dropped: nothing of it was inserted)."""
        ray = self.ray
        if not self.inflight:
            time.sleep(min(timeout, 0.01))
            return []
        refs = list(self.inflight)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:  # and every other one already there
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        got = []
        for ref in ready:
            i, _ = self.inflight.pop(ref)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the environment or get_action raised
                raise self._failed(i, exc) from exc
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
                self._restart(i, exc)
                continue
            node = out["node"]
            if self.rt.actor_nodes.get(i, [None])[-1] != node:
                self.rt.actor_nodes.setdefault(i, []).append(node)
            self.dropped[i] = int(out["dropped"])
            if out["last_drop"]:
                self.last_drop = out["last_drop"]
            self.last_batch_at = time.monotonic()
            got.append((i, out))
        return got

    def dropped_total(self) -> int:
        return self.dropped_before + sum(self.dropped)

    # ----------------------------------------------------------------- faults
    def _node(self, i: int) -> str:
        return self.rt.actor_nodes.get(i, ["(not placed yet)"])[-1]

    def _failed(self, i: int, exc) -> Exception:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, DataError):
            return cause
        what = f"{type(cause).__name__}: {cause}" if cause is not None else _reason(exc)
        return ActorError(f"Ray actor {i} (on node {self._node(i)}) failed stepping {self.cfg.env_id!r} with "
                          f"trainer.get_action: {what}. The Ray runtime restarts actors that are lost, not ones "
                          "whose code raises. Fix: make the environment and get_action robust (the actor's "
                          "traceback is in traceback_text).", str(exc))

    def _restart(self, i: int, exc) -> None:
        node = self._node(i)
        self.restarts[i] += 1
        if self.restarts[i] > self.rt.max_actor_restarts:
            raise ActorError(f"Ray actor {i} was lost {self.restarts[i]} times (the last time on node {node}: "
                             f"{_reason(exc)}); max_actor_restarts = {self.rt.max_actor_restarts}. Everything "
                             "inserted is in the replay and the checkpoint. Fix: check the cluster (`ray status`), "
                             "or allow more restarts.")
        self.rt.actor_restarts += 1
        log.warning("Ray actor %d on node %s was lost (%s); restarting it elsewhere (restart %d of at most %d)",
                    i, node, _reason(exc), self.restarts[i], self.rt.max_actor_restarts)
        try:
            self.ray.kill(self.handles[i], no_restart=True)
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        self.dropped_before += self.dropped[i]
        self.incarnation[i] += 1
        self._spawn(i)  # its node joins actor_nodes with its first batch


def _died(exc: BaseException) -> str:
    """How a Ray actor's process died, from Ray's words (its pid, exit detail, signal), on one line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    keep = [ln for ln in lines if ln.startswith(("pid:", "ip:")) or "signal" in ln.lower() or "exit" in ln.lower()]
    return "; ".join(keep[:4]) or (lines[0] if lines else type(exc).__name__)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class _RayRun(_Run):
    """One segment of a Ray run: the serial loop with the acting done by Ray actors."""

    name, runtime_id = "Ray runtime", "ray"

    def _start_actors(self, rt: RayRuntime) -> tuple:
        self.pool: _ActorPool | None = None
        self.owns_ray = False
        ray = import_ray()
        self.owns_ray = connect_ray(ray, rt.address, rt.connect_timeout_s)
        self.ray = ray
        rt.live_state = self.session.state
        rt.host_node_ran = ray.get_runtime_context().get_node_id()
        plan = self.plan
        self.k = max(1, math.ceil(plan.insert_batch / plan.envs_per_actor))  # steps per call
        self.published_at = self.session.state.updates
        # A resumed segment's actors start fresh episodes from seeds not used before.
        self.pool = _ActorPool(ray, rt, offset=self.session.state.env_steps)
        return self.pool.start()

    def _stop_actors(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
        if getattr(self, "owns_ray", False):
            self.ray.shutdown()
            self.owns_ray = False

    def dropped(self) -> int:
        pool = getattr(self, "pool", None)
        return pool.dropped_total() if pool is not None else 0

    def flush_pending(self) -> None:
        """The actors' open n-step windows are not shipped (see the module)."""

    def _submit_idle(self) -> None:
        pool, st = self.pool, self.session.state
        if pool.weights_ref is None:
            pool.publish(self.trainer.get_weights())
        limit = self.cfg.stop.max_env_steps
        epa = self.plan.envs_per_actor
        for i in pool.idle():
            ahead = pool.in_flight_steps()
            n = self.k
            if limit is not None:
                room = limit - st.env_steps - ahead
                if room <= 0:
                    return
                n = min(n, math.ceil(room / epa))
            pool.submit(i, st.env_steps + ahead, n)

    def act(self) -> None:
        """Keep every actor busy; insert the batches that arrived; record their episodes."""
        pool, st = self.pool, self.session.state
        self._submit_idle()
        got = pool.take(WAIT_S)
        if not got:
            stalled = time.monotonic() - pool.last_batch_at
            if stalled > self.rt.stall_timeout_s:
                waiting = sorted(i for i, _ in pool.inflight.values())
                raise StallError(f"no Ray actor delivered a batch for {stalled:.0f} s (stall_timeout_s = "
                                 f"{self.rt.stall_timeout_s:g}); actors waiting: {waiting}"
                                 f", nodes: {self.rt.actor_nodes}. Fix: check the cluster (`ray status`: is there "
                                 "room for the actors?) and the environment (a frozen env.step).",
                                 role="actors", stalled_s=stalled)
            return
        for _, out in got:
            base = st.env_steps
            for ret, length, at in out["episodes"]:
                st.env_steps = base + at
                self.session.record_episode(ret, length)
            st.env_steps = base + out["env_steps"]
            self.inserts.push(self.replay, *out["rows"])
        if pool.dropped_total():
            self.drops.update("the Ray actors", pool.dropped_total(), pool.last_drop)
            self.rt.dropped_nonfinite = self.drops.total
        self._submit_idle()

    def train(self) -> None:
        super().train()
        if self.learner.updates - self.published_at >= self.cfg.weight_sync_every:
            self.pool.publish(self.trainer.get_weights())
            self.published_at = self.learner.updates
