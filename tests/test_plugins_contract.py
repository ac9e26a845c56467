"""The plugin contract as the runtime and the composer use it: the plugin-author gaps, one test each.

Each gap was found by writing a backend from the guide alone (issue "every plan runs"): a broken
plugin asked by its backend name, two backends of one kind, ``max_fanout`` at run time, the
setting-2 rule for a backend not named after its kind, and the guide documenting the whole contract.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from pearl_core import Availability, Backend, BackendUnavailableError, PluginRegistry
from pearl_core.composer.backends import backend_for_kind, spec_backends
from pearl_core.composer.spec import HardwareSpec
from pearl_core.errors import PlacementError, SpecError
from pearl_core.hookspecs import hookimpl
from pearl_core.placement import backend_for_device, device_present, learner_route, make_queue, make_tree
from pearl_core.runtime.config import RuntimePlan
from pearl_core.runtime.queues import PipeQueue
from pearl_core.testing import ReferenceSumTree

ROOT = Path(__file__).resolve().parents[1]


def backend(name: str, kind: str = "npu", *, max_fanout=None, torch_type=None, devices=("npu0",), emulated=False,
            **methods):
    attrs = {"name": name, "device_kind": kind, "max_fanout": max_fanout, "torch_device_type": torch_type,
             "availability": lambda self: Availability.yes(),
             "devices": lambda self: [types.SimpleNamespace(name=d, details={"emulated": emulated}) for d in devices],
             "make_sum_tree": lambda self, capacity, fanout=16, **o: ReferenceSumTree(capacity, fanout), **methods}
    return type(f"B_{name}", (Backend,), attrs)


def registry(*classes) -> PluginRegistry:
    reg = PluginRegistry(autoload=False)
    for cls in classes:
        @hookimpl
        def pearl_register_backends(register, cls=cls):
            register(cls)

        reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends),
                            name=f"plugin-{cls.name}")
    return reg


def test_a_broken_plugin_asked_by_its_backend_name_gives_its_error_and_fix():
    @hookimpl
    def pearl_register_backends(register):
        raise ImportError("libnpu.so: cannot open shared object file")

    reg = PluginRegistry(autoload=False)
    reg.register_plugin(types.SimpleNamespace(pearl_register_backends=pearl_register_backends), name="pearl_npu",
                        distribution="pearl-npu")
    with pytest.raises(BackendUnavailableError) as info:
        reg.get_backend("npu")  # the backend's name, not the entry point's
    assert isinstance(info.value.cause, ImportError)
    assert "pearl-npu" in str(info.value) and "libnpu.so" in str(info.value)
    assert "pip install pearl-cpu" not in str(info.value) and "Fix:" in str(info.value)


def test_an_unknown_backend_does_not_blame_pearl_cpu():
    with pytest.raises(BackendUnavailableError) as info:
        registry(backend("alpha")).get_backend("tpu")
    assert info.value.cause is None and "e.g. `pip install pearl-cpu`" not in str(info.value)


def test_two_backends_of_one_kind_are_reported_never_silently_chosen():
    reg = registry(backend("npu-a"), backend("npu-b"))
    with pytest.raises(SpecError, match=r"\['npu-a', 'npu-b'\].*backend = "):
        backend_for_kind("npu", reg)
    with pytest.raises(PlacementError, match=r"npu-a.*npu-b.*backend"):
        backend_for_device("npu:0", "learner", registry=reg)
    # The user chooses: a spec field at compose time, the plan's backends at run time.
    assert backend_for_kind("npu", reg, "npu-b")[0] == "npu-b"
    assert backend_for_device("npu:0", "learner", registry=reg, backends={"npu": "npu-b"})[0] == "npu-b"
    with pytest.raises(SpecError, match="npu-c"):
        backend_for_kind("npu", reg, "npu-c")


def test_the_spec_backend_field_chooses_and_must_agree_per_kind():
    text = ('host = "cpu0"\n[[device]]\nname = "cpu0"\nkind = "cpu"\ncores = 2\nmemory_GiB = 4\nidle_power_W = 1\n'
            'active_power_W = 2\nmem_bandwidth_GBps = 10\n[[device]]\nname = "n0"\nkind = "npu"\nmemory_GiB = 4\n'
            'idle_power_W = 1\nactive_power_W = 2\nmem_bandwidth_GBps = 10\nbackend = "{b0}"\n[[device]]\nname = "n1"\n'
            'kind = "npu"\nmemory_GiB = 4\n'
            'idle_power_W = 1\nactive_power_W = 2\nmem_bandwidth_GBps = 10\nbackend = "{b1}"\n'
            + "".join(f'[[link]]\na = "cpu0"\nb = "{d}"\nlatency_us = 10\nbandwidth_GBps = 8\n' for d in ("n0", "n1")))
    reg = registry(backend("npu-a"), backend("npu-b"))
    kinds = ("cpu", "npu")
    same = HardwareSpec.from_toml(text.format(b0="npu-b", b1="npu-b"), kinds=kinds)
    assert spec_backends(same, reg)["npu"] == "npu-b"
    mixed = HardwareSpec.from_toml(text.format(b0="npu-a", b1="npu-b"), kinds=kinds)
    with pytest.raises(SpecError, match="different backends"):
        spec_backends(mixed, reg)


def test_max_fanout_is_honoured_when_the_runtime_builds_the_tree():
    reg = registry(backend("narrow", max_fanout=8))
    assert make_tree("narrow", "npu:0", 64, 8, registry=reg).capacity == 64
    with pytest.raises(PlacementError, match=r"fanouts 2\.\.8.*asks for 16.*Fix"):
        make_tree("narrow", "npu:0", 64, 16, registry=reg)


def test_setting_2_needs_one_device_not_a_backend_named_after_its_kind():
    plan = RuntimePlan(rm_backend="numpy-example", rm_device="numpy:0", learner_device="numpy:0", setting=2)
    assert int(plan.setting) == 2
    with pytest.raises(SpecError, match="setting 2 only when RM and learner share a device"):
        RuntimePlan(rm_backend="numpy-example", rm_device="numpy:0", learner_device="cpu", setting=2)


def test_a_learner_on_a_kind_without_torch_needs_a_device_trainer_or_a_kernel():
    from pearl_core.algorithms import DDPG, DQN

    def kernel(self, name):
        return (lambda *a: None) if name == "dqn_mlp" else None

    reg = registry(backend("npu", learner_kernel=kernel))
    route = learner_route(DQN, "npu:0", registry=reg)
    assert (route.how, route.torch_device, route.kernel, route.backend) == ("kernel", "cpu", "dqn_mlp", "npu")
    with pytest.raises(PlacementError, match=r"learner on 'npu:0'.*DDPG.*Fix"):
        learner_route(DDPG, "npu:0", registry=reg)
    torch_reg = registry(backend("gpu", kind="gpu", torch_type="cuda"))
    assert learner_route(DDPG, "gpu:1", registry=torch_reg).torch_device == "cuda:1"


def test_transport_comes_from_the_learner_devices_backend():
    made = []

    def make_transport(self, role, maxsize, ctx):
        q = PipeQueue(maxsize, ctx)
        made.append(role)
        return q

    reg = registry(backend("npu", make_transport=make_transport))
    q = make_queue("laq", 4, None, "npu:0", registry=reg)
    assert made == ["laq"] and isinstance(q, PipeQueue)
    q.close()
    assert isinstance(make_queue("ldq", 4, None, "cpu", registry=registry()), PipeQueue)


def test_emulated_devices_count_only_when_asked():
    reg = registry(backend("npu", devices=("npu-emu0",), emulated=True))
    why = device_present("npu:0", registry=reg)
    assert why is not None and "emulated=True" in why
    assert device_present("npu:0", registry=reg, emulated=True) is None
    assert "sees 1 device" in device_present("npu:1", registry=reg, emulated=True)


def test_the_guide_documents_the_whole_contract():
    guide = (ROOT / "docs" / "writing-a-plugin.md").read_text(encoding="utf-8")
    assert "come next" not in guide
    for term in ("DeviceRow", "CostCell", "DeviceSpec", "Workload", "device.options", "threads=", "device=",
                 "rm_threads", "learner_threads", "co_rm_threads", "co_learner_threads", "learner_dp", "emulated",
                 "max_fanout", "make_storage", "make_transport", "device_trainer", "learner_kernel",
                 "torch_device_type", "analytic_cells", "profile_cells", "backend = ", "infeasible",
                 "TransportConformance", "DQNKernelConformance", "SumTreeConformance"):
        assert term in guide, f"docs/writing-a-plugin.md does not mention {term!r}"
