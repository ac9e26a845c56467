"""pearl_core.testing.learner_kernels / ac_kernels: the free run keeps one kernel object for 20+ updates, each
compared with torch, so a kernel that goes wrong only late in its life (here from its 15th step, far past the
5 updates the free run used to take) is caught, at that step."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pearl_core.plugins import get_backend
from pearl_core.testing import ActorCriticKernelConformance, DQNKernelConformance

LATE = 15


def _cpu_kernel(name):
    try:
        return get_backend("cpu").learner_kernel(name)
    except Exception:  # noqa: BLE001 - without the CPU backend there is no kernel to plant a bug in
        return None


class _Late:
    """A kernel whose step() scales the discount (gamma) from its LATE-th step on: a planted bug."""

    def __init__(self, inner, field):
        self.inner, self.field, self.batch, self.steps = inner, field, inner.batch, 0

    def step(self, args):
        self.steps += 1
        if self.steps >= LATE:
            args = dataclasses.replace(args, **{self.field: getattr(args, self.field) * np.float32(0.9)})
        return self.inner.step(args)


def test_kits_run_one_kernel_object_for_at_least_twenty_updates():
    assert DQNKernelConformance.free_run_same_kernel >= 20 and ActorCriticKernelConformance.free_run_same_kernel >= 20


@pytest.mark.slow  # two DQN trainers, ~30 updates each
@pytest.mark.skipif(_cpu_kernel("dqn_mlp") is None, reason="needs the CPU backend's dqn_mlp kernel")
def test_dqn_kit_catches_a_kernel_that_goes_wrong_late():
    real = _cpu_kernel("dqn_mlp")

    class Suite(DQNKernelConformance):
        def kernel_factory(self):
            return lambda *arrays: _Late(real(*arrays), "gamma")

    with pytest.raises(AssertionError, match=rf"the kernel's step {LATE}\).*differ"):
        Suite().test_free_run_matches_torch()


@pytest.mark.slow  # two TD3 trainers, ~30 updates each
@pytest.mark.skipif(_cpu_kernel("td3_mlp") is None, reason="needs the CPU backend's td3_mlp kernel")
def test_actor_critic_kit_catches_a_kernel_that_goes_wrong_late():
    real = _cpu_kernel("td3_mlp")

    class Suite(ActorCriticKernelConformance):
        def kernel_factory(self, name):
            return (lambda *arrays: _Late(real(*arrays), "discount")) if name == "td3_mlp" else None

    with pytest.raises(AssertionError, match=rf"the kernel's step {LATE}\).*differs? from torch's"):
        Suite().test_free_run_matches_torch("td3")
