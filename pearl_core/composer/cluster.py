r"""The cluster a Ray run goes to: its nodes, their devices and links, where the host and the actors go.

Algorithm 1 (:mod:`pearl_core.composer.algorithm`) places the replay manager, the learner and the
Data Storage on the devices of one machine's hardware spec. On a cluster
(:class:`~pearl_core.runtime.rayrun.RayRuntime`) those three run together on one node, the *host
node*: the node that has the plan's devices for them (:func:`place_host`: the driver's node when it
has them, else the first node that does, e.g. the GPU box of a plan whose learner is a GPU), and
the actors spread over the nodes by their link to the host node. A node's link is given to the
driver's node; between two other nodes the model takes the slower of their two links (the larger
latency, the smaller bandwidth). What a link changes is the actors' side of the iteration. Notation
as in Algorithm 1 (SI units), plus::

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
order); each takes one actor per ``actor_cpus`` of its CPUs (the host node keeps ``reserve``
CPUs for the host loop and the learner) until ``n_actors`` are placed, or, with ``n_actors=None``,
until the supply meets the demand (the fewest actors that keep the learner fed, at most every
CPU). :meth:`ClusterPlacement.nodes` lists the node of each actor for ``RayRuntime(nodes=...)``.

A cluster spec is TOML (units in the key names, as the hardware spec)::

    name = "lab"
    [[node]]
    name = "head"
    cpus = 4
    driver = true            # the program runs here; its link is the local one
    [[node]]
    name = "gpu-box-2"
    cpus = 16
    devices = ["h100"]       # devices of the hardware spec (names or kinds) on this node; a CPU is implied
    latency_us = 100         # one message to the driver's node
    bandwidth_GBps = 1.25    # 10 GbE
    address = "10.0.0.12"    # its host's IP: with --ray, the running nodes there get this link

or it is read from a running cluster (:meth:`ClusterSpec.from_ray`): ``ray.nodes()`` gives each
node's CPUs, GPUs (kind ``cuda``), custom resources (each a device kind, e.g. ``fpga``) and address.
Ray does not report link speeds: a node on the driver's host gets :data:`LOCAL_LINK`, another host
:data:`NETWORK_LINK` unless the caller says otherwise, or (``measure=True``,
:func:`measure_links`) each node's link is measured: the median round trip of a call to a Ray
actor pinned there returning 1 byte (less :data:`RPC_S`: the latency) and of one returning
``payload_bytes`` (the difference: the bandwidth), fetched into the driver's process; or they are
given by a spec (:meth:`ClusterSpec.with_links_from`: ``pearl plan --ray ADDRESS --cluster SPEC``, the
composed program's ``--ray ADDRESS --cluster SPEC``), node by node by the address of its host.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pearl_core.errors import SpecError

__all__ = ["ClusterPlacement", "ClusterSpec", "LOCAL_LINK", "NETWORK_LINK", "NodeSpec", "RPC_S", "describe",
           "measure_links", "place_actors", "place_for_plan", "place_host"]

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
    """One node: CPUs for actors, its devices, and its link to the driver's node.

    Attributes:
        name: a label (the spec's, or the Ray node id).
        cpus: CPUs Ray may give actors there.
        latency_s, bandwidth_Bps: one message to the driver's node.
        driver: whether the program runs here.
        address: the node's IP address, when known.
        devices: the devices of the hardware spec on this node besides its CPU, by name
            (``"h100"``) or kind (``"cuda"``: what a Ray node with GPUs gets).
    """

    name: str
    cpus: float
    latency_s: float = LOCAL_LINK[0]
    bandwidth_Bps: float = LOCAL_LINK[1]
    driver: bool = False
    address: str = ""
    devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"node {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"cluster spec: a node's name = {self.name!r}; expected a non-empty string.")
        devices = self.devices
        if isinstance(devices, str) or not isinstance(devices, (tuple, list)) or not all(
                isinstance(d, str) and d for d in devices):
            raise SpecError(f"cluster spec, {where}: devices = {devices!r}; expected a list of device names or "
                            'kinds of the hardware spec (e.g. ["h100"]).')
        object.__setattr__(self, "devices", tuple(devices))
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

    def has(self, device: Mapping[str, Any]) -> bool:
        """Whether this node has ``device`` (a hardware-spec device table: ``name``, ``kind``); every
        node has a CPU."""
        return device.get("kind") == "cpu" or device.get("name") in self.devices or device.get("kind") in self.devices


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
        known = {"name", "cpus", "driver", "address", "devices", "latency_us", "latency_ms", "latency_s",
                 "bandwidth_GBps", "bandwidth_MBps", "bandwidth_Bps"}
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
            nodes.append(NodeSpec(raw.get("name", ""), raw.get("cpus", 0), lat, bw, driver, raw.get("address", ""),
                                  raw.get("devices", ())))
        return cls(tuple(nodes), name=str(data.get("name", "cluster")), source=source)

    @classmethod
    def from_ray(cls, address: str | None = None, *, network: tuple[float, float] = NETWORK_LINK,
                 measure: bool = False, links: "ClusterSpec | None" = None) -> "ClusterSpec":
        """The alive nodes of the Ray cluster at ``address`` (``None``: the one this process is connected
        to, else ``"auto"``); the driver is this process's node. ``network``: (latency s, bandwidth B/s)
        of a node on another host; ``measure``: measure every node's link instead
        (:func:`measure_links`, a few seconds); ``links``: a cluster spec that gives them instead
        (:meth:`with_links_from`)."""
        from pearl_core.runtime.rayrun import connect_ray, import_ray

        ray = import_ray()
        started = not ray.is_initialized()
        connect_ray(ray, address or "auto")
        try:
            here = ray.get_runtime_context().get_node_id()
            rows = [n for n in ray.nodes() if n.get("Alive")]
            measured = measure_links(ray, [n["NodeID"] for n in rows]) if measure else {}
        finally:
            if started:
                ray.shutdown()
        host = next((n.get("NodeManagerAddress", "") for n in rows if n["NodeID"] == here), "")
        nodes = []
        for n in rows:
            local = n.get("NodeManagerAddress", "") == host
            lat, bw = measured.get(n["NodeID"], LOCAL_LINK if local else network)
            res = n.get("Resources", {})
            devices = (("cuda",) if float(res.get("GPU", 0.0)) > 0 else ()) + tuple(sorted(
                k for k in res if k not in _RAY_PLAIN_RESOURCES and not k.startswith(("node:", "accelerator_type:"))))
            nodes.append(NodeSpec(n["NodeID"], float(res.get("CPU", 0.0)), lat, bw, n["NodeID"] == here,
                                  n.get("NodeManagerAddress", ""), devices))
        running = cls(tuple(nodes), name="ray", source=f"ray cluster {address or 'auto'}"
                      + (" (links measured)" if measured else ""))
        return running if links is None else running.with_links_from(links)

    def with_links_from(self, spec: "ClusterSpec") -> "ClusterSpec":
        """This running cluster (:meth:`from_ray`) with its nodes' links taken from ``spec``, a cluster
        spec whose non-driver nodes give their host's ``address``: every running node at that address
        gets that node's latency and bandwidth (nodes on one host share its link); the driver's node
        keeps the local link, and so does a node on the driver's host that no spec node names. CPUs
        and devices stay Ray's. A running node on another host that no spec node names is refused
        (its link would be a guess), as is a spec that names an address twice or a non-driver node
        without one; spec nodes with no running node are listed in the result's ``source``."""
        where = f"cluster spec {spec.source or spec.name!r}"
        by_address: dict[str, NodeSpec] = {}
        for s in spec.nodes:
            if s.driver:
                continue
            if not s.address:
                raise SpecError(f"{where}, node {s.name!r}: no address; with --ray each node's link is given to "
                                "the running cluster's nodes at its address. Fix: add address = \"<its IP>\" "
                                "(`ray status -v` or ray.nodes()' NodeManagerAddress lists them).")
            if s.address in by_address:
                raise SpecError(f"{where}: nodes {by_address[s.address].name!r} and {s.name!r} both have address "
                                f"{s.address!r}. Fix: one [[node]] per host.")
            by_address[s.address] = s
        here = self.driver.address
        nodes, used = [], set()
        for n in self.nodes:
            link = None if n.driver else by_address.get(n.address)
            if link is None and not n.driver and n.address != here:
                raise SpecError(f"{where} has no node with address {n.address!r}, where the running cluster has "
                                f"node {n.name} ({n.cpus:g} CPUs). Fix: add a [[node]] with address = "
                                f"\"{n.address}\" and its latency and bandwidth to the driver's host, or leave "
                                "the spec out (a node on another host is then costed as 10 GbE).")
            if link is not None:
                used.add(link.address)
                n = NodeSpec(n.name, n.cpus, link.latency_s, link.bandwidth_Bps, n.driver, n.address, n.devices)
            nodes.append(n)
        idle = [f"{s.name} ({a})" for a, s in by_address.items() if a not in used]
        return ClusterSpec(tuple(nodes), name=self.name, source=f"{self.source}, links from {spec.source or spec.name}"
                           + (f" (not running: {', '.join(idle)})" if idle else ""))


class _Echo:
    """What a link measurement calls on a node: a Ray actor whose :meth:`payload` returns ``nbytes``
    bytes (a numpy array: Ray's object store carries it without pickling its data)."""

    def payload(self, nbytes: int):
        import numpy as np

        return np.ones(nbytes, dtype=np.uint8)


def measure_links(ray, node_ids: Sequence[str], *, payload_bytes: int = 8 << 20,
                  rounds: int = 5) -> dict[str, tuple[float, float]]:
    """``{node id: (latency s, bandwidth B/s)}`` from each node to this process, measured the way
    the runtime talks to its actors.

    Per node, a Ray actor pinned there (no CPU reserved) is called to return 1 byte, then
    ``payload_bytes`` bytes, ``rounds`` times each after one warm-up call; latency = median small
    round trip - :data:`RPC_S` (at least 1 us: the model adds :data:`RPC_S` back), and bandwidth =
    ``payload_bytes`` / (median large - median small round trip). The actors are killed after.

    Raises:
        SpecError: a node does not answer within 60 s (it is busy or gone; the fix).
    """
    import statistics
    import time

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls = ray.remote(_Echo)
    out: dict[str, tuple[float, float]] = {}
    for node in node_ids:
        echo = cls.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()

        def round_trip(nbytes: int) -> float:
            t0 = time.perf_counter()
            got = ray.get(echo.payload.remote(nbytes), timeout=60)
            dt = time.perf_counter() - t0
            if got.size != nbytes:  # pragma: no cover - Ray returned something else
                raise SpecError(f"measuring the link of node {node}: {got.size} bytes came back, {nbytes} asked.")
            return dt

        try:
            round_trip(1)
            small = statistics.median(round_trip(1) for _ in range(rounds))
            large = statistics.median(round_trip(payload_bytes) for _ in range(rounds))
        except ray.exceptions.GetTimeoutError as exc:
            raise SpecError(f"measuring the link of Ray node {node}: no answer within 60 s. Fix: check the node "
                            "(`ray status`), or read the cluster without measuring its links.") from exc
        finally:
            ray.kill(echo, no_restart=True)
        out[node] = (max(1e-6, small - RPC_S), payload_bytes / max(large - small, 1e-9))
    return out


#: Ray resources that are not devices of a hardware spec.
_RAY_PLAIN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})


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
    """Where the host and the actors go, and what the model predicts of it.

    Attributes:
        actors: ``(node name, actors there)`` in placement order (nodes with none left out).
        call_s: seconds of one actor call per node used.
        supply: env steps/s the actors deliver; demand: env steps/s the learner uses.
        predicted: ``min(supply, demand)``; bound: ``"actors"`` or ``"learner"``.
        host: the node the host loop, the replay manager and the learner run on ("": the driver's).
        host_gpus: GPUs the host reserves there (the plan's CUDA devices for RM, learner and DS).
        on_driver: whether the host node is the driver's (the program's own process hosts the run).
    """

    actors: tuple[tuple[str, int], ...]
    call_s: Mapping[str, float] = field(default_factory=dict)
    supply: float = 0.0
    demand: float = 0.0
    host: str = ""
    host_gpus: float = 0.0
    on_driver: bool = True

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

    def runtime_kwargs(self) -> dict[str, Any]:
        """``RayRuntime``'s placement arguments: ``nodes``, and ``host_node`` / ``host_gpus`` when the
        host is not the driver's node."""
        kw: dict[str, Any] = {"nodes": self.nodes()}
        if not self.on_driver:
            kw.update(host_node=self.host, host_gpus=self.host_gpus)
        return kw


def _link(n: NodeSpec, host: NodeSpec) -> NodeSpec:
    """``n`` with its link to ``host`` (see the module): local on the host itself, the node's own
    link when the host is the driver's node (or ``n`` is the driver, the host's), else the slower
    of the two."""
    if n.name == host.name:
        lat, bw = LOCAL_LINK
    elif host.driver:
        lat, bw = n.latency_s, n.bandwidth_Bps
    elif n.driver:
        lat, bw = host.latency_s, host.bandwidth_Bps
    else:
        lat, bw = max(n.latency_s, host.latency_s), min(n.bandwidth_Bps, host.bandwidth_Bps)
    return NodeSpec(n.name, n.cpus, lat, bw, n.driver, n.address, n.devices)


def place_host(cluster: ClusterSpec, devices: Sequence[Mapping[str, Any]]) -> NodeSpec:
    """The node that runs the host loop, the replay manager and the learner: the driver's node when
    it has every one of ``devices`` (the plan's RM, learner and DS devices), else the first node
    in spec order that does.

    Raises:
        SpecError: no node has them all (which device is missing where, and the fix).
    """
    need = [d for d in devices if d.get("kind") != "cpu"]
    order = [cluster.driver] + [n for n in cluster.nodes if not n.driver]
    for n in order:
        if all(n.has(d) for d in need):
            return n
    wanted = sorted({f"{d.get('name')} ({d.get('kind')})" for d in need})
    have = {n.name: list(n.devices) for n in cluster.nodes}
    raise SpecError(f"no node of the cluster {cluster.source or cluster.name!r} has the plan's devices {wanted} for "
                    f"the replay manager, learner and Data Storage (devices per node: {have}). Fix: add "
                    "devices = [...] to the node that has them in the cluster spec (or start its Ray node with "
                    "--num-gpus / --resources), or compose the plan for the devices the cluster has.")


def place_actors(cluster: ClusterSpec, *, actor_step_s: float, iteration_s: float, replay_ratio: float,
                 experience_bytes: int, weight_bytes: int, insert_batch: int = 32, envs_per_actor: int = 1,
                 weight_sync_every: int = 10, n_actors: int | None = None, actor_cpus: float = 1.0,
                 reserve: float = 1.0, host: str | None = None, host_gpus: float = 0.0) -> ClusterPlacement:
    """Place the actors of a Ray run on ``cluster`` (the module's model and rule), around the host
    node ``host`` (a node name; ``None``: the driver's).

    Raises:
        SpecError: a bad number, an unknown host, or no room for ``n_actors`` actors (the CPUs each
        node offers).
    """
    for name, v in (("actor_step_s", actor_step_s), ("iteration_s", iteration_s), ("replay_ratio", replay_ratio),
                    ("actor_cpus", actor_cpus)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise SpecError(f"place_actors: {name} = {v!r}; expected a finite number > 0.")
    if n_actors is not None and (isinstance(n_actors, bool) or not isinstance(n_actors, int) or n_actors < 1):
        raise SpecError(f"place_actors: n_actors = {n_actors!r}; expected None (as many as keep the learner fed) "
                        "or an int >= 1.")
    by = {n.name: n for n in cluster.nodes}
    if host is not None and host not in by:
        raise SpecError(f"place_actors: host = {host!r} is not a node of the cluster "
                        f"{cluster.source or cluster.name!r} (nodes: {sorted(by)}).")
    home = by[host] if host is not None else cluster.driver
    linked = [_link(n, home) for n in cluster.nodes]
    per_call = max(1, math.ceil(insert_batch / envs_per_actor)) * envs_per_actor  # experiences per call
    calls_per_sync = weight_sync_every / (per_call * replay_ratio)  # calls between two publications
    call_s = {}
    for n in linked:
        call_s[n.name] = (per_call * actor_step_s + n.call_s(per_call * experience_bytes)
                          + n.call_s(weight_bytes) * min(1.0, 1.0 / calls_per_sync))
    slots = {n.name: int((n.cpus - (reserve if n.name == home.name else 0.0)) // actor_cpus) for n in linked}
    order = sorted(linked, key=lambda n: (call_s[n.name], -slots[n.name], [m.name for m in linked].index(n.name)))
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
                        f"{actor_cpus:g} CPU(s) (per node: {room}; the host node {home.name} keeps {reserve:g} for "
                        f"the learner), but {n_actors or 1} are asked for. Fix: fewer actors, smaller actor_cpus, or "
                        "more nodes.")
    actors = tuple((n.name, placed[n.name]) for n in order if placed.get(n.name))
    return ClusterPlacement(actors, {k: call_s[k] for k, _ in actors}, supply, demand, home.name, float(host_gpus),
                            home.driver)


def describe(placement: ClusterPlacement, cluster: ClusterSpec) -> Sequence[str]:
    """Lines for a terminal: actors per node with their link and call cost, supply vs demand."""
    home = next((n for n in cluster.nodes if n.name == placement.host), cluster.driver)
    by = {n.name: _link(n, home) for n in cluster.nodes}
    where = (f"the driver's node {home.name}" if home.driver else
             f"node {home.name} (not the driver's: the program runs them there as a Ray actor"
             + (f" with {placement.host_gpus:g} GPU(s)" if placement.host_gpus else "") + ")")
    lines = [f"Ray cluster {cluster.source or cluster.name}: {len(cluster.nodes)} nodes; replay and learner on {where}"]
    for name, k in placement.actors:
        n = by[name]
        lines.append(f"  {name}: {k} actor(s), {n.cpus:g} CPUs, link {n.latency_s * 1e6:.0f} us / "
                     f"{n.bandwidth_Bps / 1e9:.3g} GB/s, {placement.call_s[name] * 1e3:.3f} ms per actor call"
                     + (" (host)" if n.name == home.name else "") + (" (driver)" if n.driver else ""))
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
    (:func:`~pearl_core.composer.profiling.profile_actor_step`) unless given. The host node is
    :func:`place_host`'s for the plan's RM, learner and DS devices; it reserves as many GPUs as
    the highest CUDA index they use + 1 (Ray numbers a node's GPUs it hands out from 0)."""
    devices = [plan._device(name) for name in (plan.rm_device, plan.learner_device, plan.ds_device)]
    home = place_host(cluster, devices)
    cuda = [int(d.get("index") or 0) for d in devices if d.get("kind") == "cuda"]
    wl = plan.workload_value()
    if actor_step_s is None:
        host = plan.spec.get("host")
        row = plan.matrix.row(host) if host in plan.matrix.devices else None
        given = (row.costs.actor_step_s if row.costs is not None else row.config.get("actor_step_s")  # older plans
                 ) if row is not None else None
        if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
            actor_step_s = float(given)
        else:
            from pearl_core.composer.profiling import profile_actor_step

            actor_step_s = profile_actor_step(wl, iterations=200)
    return place_actors(cluster, actor_step_s=actor_step_s, iteration_s=plan.predicted_iteration_s,
                        replay_ratio=replay_ratio, experience_bytes=wl.experience_bytes, weight_bytes=wl.param_bytes,
                        insert_batch=insert_batch, envs_per_actor=wl.envs_per_actor,
                        weight_sync_every=weight_sync_every, n_actors=n_actors, host=home.name,
                        host_gpus=float(max(cuda) + 1) if cuda else 0.0)
