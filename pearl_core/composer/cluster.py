r"""The cluster a Ray run's actors go to: its nodes, their links to the driver, and where the actors go.

Algorithm 1 (:mod:`pearl_core.composer.algorithm`) places the replay manager, the learner and the
Data Storage on the devices of the node that runs the program (the *driver*); across a cluster
(:class:`~pearl_core.runtime.rayrun.RayRuntime`) only the actors move. What a node's link changes is
the actors' side of the iteration. Notation as in Algorithm 1 (SI units), plus::

    a        actor seconds per experience (its policy's action + one env step; measured by
             profile_actor_step, or the host row's ``actor_step_s`` of a profiled plan)
    k·E_a    experiences per actor call (k = ceil(BS_i / E_a) steps of its E_a environments)
    c_n(b) = rpc + lat_n + b / bw_n      one call's reply of b bytes from node n to the driver
    W        bytes of the learner's weights, fetched by every actor once per publication

    t_call(n)  = k·E_a·a + c_n(k·E_a·E) + c_n(W) · min(1, k·E_a·rr / sync)   one actor call on node n
    supply     = sum over actors of k·E_a / t_call(node)                     env steps/s the actors deliver
    demand     = 1 / (T_itr · rr)                                             env steps/s the learner uses
    predicted  = min(supply, demand)                                          (rr: replay ratio; sync:
                                                                               weight_sync_every updates)

Placement: nodes in increasing ``t_call`` (the cheapest link first; ties: more CPUs first, then spec
order); each takes one actor per ``actor_cpus`` of its CPUs (the driver's node keeps ``reserve``
CPUs for the host loop and the learner) until ``n_actors`` are placed, or, with ``n_actors=None``,
until the supply meets the demand (the fewest actors that keep the learner fed, at most every
CPU). :meth:`ClusterPlacement.nodes` lists the node of each actor for ``RayRuntime(nodes=...)``.

A cluster spec is TOML (units in the key names, as the hardware spec)::

    name = "lab"
    [[node]]
    name = "head"
    cpus = 4
    driver = true            # the program runs here (replay, learner); its link is the local one
    [[node]]
    name = "gpu-box-2"
    cpus = 16
    latency_us = 100         # one message to the driver's node
    bandwidth_GBps = 1.25    # 10 GbE

or it is read from a running cluster (:meth:`ClusterSpec.from_ray`): ``ray.nodes()`` gives each
node's CPUs and address; a node on the driver's host gets :data:`LOCAL_LINK`, another host
:data:`NETWORK_LINK` unless the caller says otherwise (Ray does not report link speeds).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pearl_core.errors import SpecError

__all__ = ["ClusterPlacement", "ClusterSpec", "LOCAL_LINK", "NETWORK_LINK", "NodeSpec", "RPC_S", "describe",
           "place_actors", "place_for_plan"]

#: (latency s, bandwidth B/s) between Ray nodes on one host: an object-store copy through shared
#: memory (estimate: a few GB/s for a memcpy in and out; tens of microseconds to hand a buffer over).
LOCAL_LINK = (50e-6, 5e9)
#: (latency s, bandwidth B/s) to a node on another host unless told: 10 Gigabit Ethernet
#: (1.25 GB/s line rate; ~100 us for a small message through the kernel's TCP stack, both ends).
NETWORK_LINK = (100e-6, 1.25e9)
#: Seconds of Ray's own work per actor call (submit, schedule, reply; estimate for a local call of a
#: Ray 2.x actor method, ~0.2-0.5 ms on a small VM).
RPC_S = 300e-6


@dataclass(frozen=True)
class NodeSpec:
    """One node: CPUs for actors and its link to the driver's node.

    Attributes:
        name: a label (the spec's, or the Ray node id).
        cpus: CPUs Ray may give actors there.
        latency_s, bandwidth_Bps: one message to the driver's node.
        driver: whether the program (replay, learner) runs here.
        address: the node's IP address, when known.
    """

    name: str
    cpus: float
    latency_s: float = LOCAL_LINK[0]
    bandwidth_Bps: float = LOCAL_LINK[1]
    driver: bool = False
    address: str = ""

    def __post_init__(self) -> None:
        where = f"node {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"cluster spec: a node's name = {self.name!r}; expected a non-empty string.")
        for key, v, low in (("cpus", self.cpus, 0.0), ("latency", self.latency_s, 0.0),
                            ("bandwidth", self.bandwidth_Bps, None)):
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and (
                v > 0 if low is None else v >= low)
            if not ok:
                raise SpecError(f"cluster spec, {where}: {key} = {v!r}; expected a finite number "
                                f"{'> 0' if low is None else '>= 0'}.")

    def call_s(self, nbytes: float) -> float:
        """Seconds of one actor call whose reply holds ``nbytes`` bytes (Ray's work + the link)."""
        return RPC_S + self.latency_s + nbytes / self.bandwidth_Bps


@dataclass(frozen=True)
class ClusterSpec:
    """The nodes of a cluster, exactly one of them the driver's."""

    nodes: tuple[NodeSpec, ...]
    name: str = "cluster"
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if not self.nodes:
            raise SpecError(f"cluster spec {self.source or self.name!r} has no node. Fix: add [[node]] tables.")
        names = [n.name for n in self.nodes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(f"cluster spec {self.source or self.name!r}: node names {dup} appear more than once.")
        drivers = [n.name for n in self.nodes if n.driver]
        if len(drivers) != 1:
            raise SpecError(f"cluster spec {self.source or self.name!r}: {len(drivers)} driver nodes {drivers}; "
                            "expected exactly one (driver = true on the node the program runs on).")

    @property
    def driver(self) -> NodeSpec:
        return next(n for n in self.nodes if n.driver)

    @classmethod
    def load(cls, path: str | Path) -> "ClusterSpec":
        """Read a cluster spec (TOML, see the module)."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"cluster spec {str(path)!r} cannot be read: {exc}.") from exc
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "") -> "ClusterSpec":
        known = {"name", "cpus", "driver", "address", "latency_us", "latency_ms", "latency_s", "bandwidth_GBps",
                 "bandwidth_MBps", "bandwidth_Bps"}
        nodes = []
        for i, raw in enumerate(data.get("node", ())):
            if not isinstance(raw, Mapping):
                raise SpecError(f"cluster spec {source!r}: node {i} is not a table.")
            extra = sorted(set(raw) - known)
            if extra:
                raise SpecError(f"cluster spec {source!r}, node {raw.get('name', i)!r}: unknown keys {extra}; "
                                f"expected some of {sorted(known)}.")
            driver = bool(raw.get("driver", False))
            lat = _quantity(raw, "latency", {"us": 1e-6, "ms": 1e-3, "s": 1.0}, LOCAL_LINK[0] if driver else None,
                            source)
            bw = _quantity(raw, "bandwidth", {"GBps": 1e9, "MBps": 1e6, "Bps": 1.0},
                           LOCAL_LINK[1] if driver else None, source)
            nodes.append(NodeSpec(raw.get("name", ""), raw.get("cpus", 0), lat, bw, driver, raw.get("address", "")))
        return cls(tuple(nodes), name=str(data.get("name", "cluster")), source=source)

    @classmethod
    def from_ray(cls, address: str | None = None, *, network: tuple[float, float] = NETWORK_LINK) -> "ClusterSpec":
        """The alive nodes of the Ray cluster at ``address`` (``None``: the one this process is connected
        to, else ``"auto"``); the driver is this process's node. ``network``: (latency s, bandwidth B/s)
        of a node on another host."""
        from pearl_core.runtime.rayrun import connect_ray, import_ray

        ray = import_ray()
        started = not ray.is_initialized()
        connect_ray(ray, address or "auto")
        try:
            here = ray.get_runtime_context().get_node_id()
            rows = [n for n in ray.nodes() if n.get("Alive")]
        finally:
            if started:
                ray.shutdown()
        host = next((n.get("NodeManagerAddress", "") for n in rows if n["NodeID"] == here), "")
        nodes = []
        for n in rows:
            local = n.get("NodeManagerAddress", "") == host
            lat, bw = LOCAL_LINK if local else network
            nodes.append(NodeSpec(n["NodeID"], float(n.get("Resources", {}).get("CPU", 0.0)), lat, bw,
                                  n["NodeID"] == here, n.get("NodeManagerAddress", "")))
        return cls(tuple(nodes), name="ray", source=f"ray cluster {address or 'auto'}")


def _quantity(raw: Mapping[str, Any], prefix: str, units: Mapping[str, float], default: float | None,
              source: str) -> float:
    given = [(k, raw[k]) for k in (f"{prefix}_{u}" for u in units) if k in raw]
    if len(given) > 1:
        raise SpecError(f"cluster spec {source!r}, node {raw.get('name')!r}: {prefix} given twice ({given}).")
    if not given:
        if default is None:
            raise SpecError(f"cluster spec {source!r}, node {raw.get('name')!r}: no {prefix} to the driver's node. "
                            f"Fix: add {prefix}_{next(iter(units))} = ...")
        return default
    key, v = given[0]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"cluster spec {source!r}, node {raw.get('name')!r}: {key} = {v!r}; expected a number.")
    return float(v) * units[key.rsplit("_", 1)[1]]


@dataclass(frozen=True)
class ClusterPlacement:
    """Where the actors go, and what the model predicts of it.

    Attributes:
        actors: ``(node name, actors there)`` in placement order (nodes with none left out).
        call_s: seconds of one actor call per node used.
        supply: env steps/s the actors deliver; demand: env steps/s the learner uses.
        predicted: ``min(supply, demand)``; bound: ``"actors"`` or ``"learner"``.
    """

    actors: tuple[tuple[str, int], ...]
    call_s: Mapping[str, float] = field(default_factory=dict)
    supply: float = 0.0
    demand: float = 0.0

    @property
    def predicted(self) -> float:
        return min(self.supply, self.demand)

    @property
    def bound(self) -> str:
        return "learner" if self.demand <= self.supply else "actors"

    @property
    def n_actors(self) -> int:
        return sum(k for _, k in self.actors)

    def nodes(self) -> list[str]:
        """The node of each actor, in actor order (``RayRuntime(nodes=...)``)."""
        return [name for name, k in self.actors for _ in range(k)]


def place_actors(cluster: ClusterSpec, *, actor_step_s: float, iteration_s: float, replay_ratio: float,
                 experience_bytes: int, weight_bytes: int, insert_batch: int = 32, envs_per_actor: int = 1,
                 weight_sync_every: int = 10, n_actors: int | None = None, actor_cpus: float = 1.0,
                 reserve: float = 1.0) -> ClusterPlacement:
    """Place the actors of a Ray run on ``cluster`` (the module's model and rule).

    Raises:
        SpecError: a bad number, or no room for ``n_actors`` actors (the CPUs each node offers).
    """
    for name, v in (("actor_step_s", actor_step_s), ("iteration_s", iteration_s), ("replay_ratio", replay_ratio),
                    ("actor_cpus", actor_cpus)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise SpecError(f"place_actors: {name} = {v!r}; expected a finite number > 0.")
    if n_actors is not None and (isinstance(n_actors, bool) or not isinstance(n_actors, int) or n_actors < 1):
        raise SpecError(f"place_actors: n_actors = {n_actors!r}; expected None (as many as keep the learner fed) "
                        "or an int >= 1.")
    per_call = max(1, math.ceil(insert_batch / envs_per_actor)) * envs_per_actor  # experiences per call
    calls_per_sync = weight_sync_every / (per_call * replay_ratio)  # calls between two publications
    call_s = {}
    for n in cluster.nodes:
        call_s[n.name] = (per_call * actor_step_s + n.call_s(per_call * experience_bytes)
                          + n.call_s(weight_bytes) * min(1.0, 1.0 / calls_per_sync))
    slots = {n.name: int((n.cpus - (reserve if n.driver else 0.0)) // actor_cpus) for n in cluster.nodes}
    order = sorted(cluster.nodes, key=lambda n: (call_s[n.name], -slots[n.name], cluster.nodes.index(n)))
    demand = 1.0 / (iteration_s * replay_ratio)
    want = n_actors if n_actors is not None else sum(max(0, s) for s in slots.values())
    placed: dict[str, int] = {}
    supply = 0.0
    for n in order:
        while slots[n.name] > placed.get(n.name, 0) and sum(placed.values()) < want:
            if n_actors is None and supply >= demand:
                break
            placed[n.name] = placed.get(n.name, 0) + 1
            supply += per_call / call_s[n.name]
    got = sum(placed.values())
    if got == 0 or (n_actors is not None and got < n_actors):
        room = {k: max(0, v) for k, v in slots.items()}
        raise SpecError(f"the cluster {cluster.source or cluster.name!r} has room for {sum(room.values())} actors of "
                        f"{actor_cpus:g} CPU(s) (per node: {room}; the driver's node keeps {reserve:g} for the "
                        f"learner), but {n_actors or 1} are asked for. Fix: fewer actors, smaller actor_cpus, or "
                        "more nodes.")
    actors = tuple((n.name, placed[n.name]) for n in order if placed.get(n.name))
    return ClusterPlacement(actors, {k: call_s[k] for k, _ in actors}, supply, demand)


def describe(placement: ClusterPlacement, cluster: ClusterSpec) -> Sequence[str]:
    """Lines for a terminal: actors per node with their link and call cost, supply vs demand."""
    by = {n.name: n for n in cluster.nodes}
    lines = [f"Ray cluster {cluster.source or cluster.name}: {len(cluster.nodes)} nodes; replay and learner on the "
             f"driver's node {cluster.driver.name}"]
    for name, k in placement.actors:
        n = by[name]
        lines.append(f"  {name}: {k} actor(s), {n.cpus:g} CPUs, link {n.latency_s * 1e6:.0f} us / "
                     f"{n.bandwidth_Bps / 1e9:.3g} GB/s, {placement.call_s[name] * 1e3:.3f} ms per actor call"
                     + (" (driver)" if n.driver else ""))
    lines.append(f"  actors deliver {placement.supply:,.0f} env steps/s; the learner uses {placement.demand:,.0f}; "
                 f"predicted {placement.predicted:,.0f} env steps/s ({placement.bound}-bound)")
    return lines


def place_for_plan(cluster: ClusterSpec, plan: Any, *, replay_ratio: float = 0.5, n_actors: int | None = None,
                   insert_batch: int = 32, weight_sync_every: int = 10,
                   actor_step_s: float | None = None) -> ClusterPlacement:
    """:func:`place_actors` for a :class:`~pearl_core.composer.plan.PlacementPlan`: its predicted
    iteration, its workload's experience and weight bytes and envs per actor (``insert_batch``,
    ``weight_sync_every``: the runtime's, whose defaults the composer keeps); the actor's
    time per experience from the plan's profiled host row (``actor_step_s``), else measured here
    (:func:`~pearl_core.composer.profiling.profile_actor_step`) unless given."""
    wl = plan.workload_value()
    if actor_step_s is None:
        host = plan.spec.get("host")
        row = plan.matrix.row(host) if host in plan.matrix.devices else None
        given = row.config.get("actor_step_s") if row is not None else None
        if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
            actor_step_s = float(given)
        else:
            from pearl_core.composer.profiling import profile_actor_step

            actor_step_s = profile_actor_step(wl, iterations=200)
    return place_actors(cluster, actor_step_s=actor_step_s, iteration_s=plan.predicted_iteration_s,
                        replay_ratio=replay_ratio, experience_bytes=wl.experience_bytes, weight_bytes=wl.param_bytes,
                        insert_batch=insert_batch, envs_per_actor=wl.envs_per_actor,
                        weight_sync_every=weight_sync_every, n_actors=n_actors)
