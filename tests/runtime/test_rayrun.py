"""Connecting to a Ray cluster has a deadline (pearl_core.runtime.rayrun.connect_ray; issue 43).

Before, an address nothing listens on made ``ray.init`` retry for minutes without a word (> 60 s in the trial);
now it is a SpecError naming the address and the fix within ``connect_timeout_s``.
"""

from __future__ import annotations

import socket
import time

import pytest

from pearl_core.errors import SpecError
from pearl_core.runtime import rayrun


class _FakeRay:
    def __init__(self):
        self.calls = []

    def is_initialized(self):
        return False

    def init(self, **kw):
        self.calls.append(kw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["{h}:{p}", "ray://{h}:{p}"])
def test_an_address_nothing_listens_on_is_a_spec_error_at_once(form):
    ray, address = _FakeRay(), form.format(h="127.0.0.1", p=_free_port())
    t = time.monotonic()
    with pytest.raises(SpecError, match="cannot connect to the Ray cluster at") as err:
        rayrun.connect_ray(ray, address, timeout_s=5)
    assert time.monotonic() - t < 3
    assert address in str(err.value) and "ray start --head" in str(err.value) and "connect_timeout_s" in str(err.value)
    assert ray.calls == []  # Ray was never asked to wait for it


def test_an_address_that_never_answers_gives_up_at_the_deadline():
    ray = _FakeRay()
    t = time.monotonic()
    with pytest.raises(SpecError, match=r"192\.0\.2\.1:6379"):  # TEST-NET-1: routed nowhere
        rayrun.connect_ray(ray, "192.0.2.1:6379", timeout_s=0.5)
    assert time.monotonic() - t < 3 and ray.calls == []


def test_a_listening_address_goes_on_to_ray_init_and_auto_is_not_probed():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        ray = _FakeRay()
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        assert rayrun.connect_ray(ray, address, timeout_s=5) is False
        assert ray.calls[0]["address"] == address
    ray = _FakeRay()
    rayrun.connect_ray(ray, "auto", timeout_s=5)
    assert ray.calls[0]["address"] == "auto"


def test_the_deadline_is_configurable_and_checked(monkeypatch):
    assert rayrun.connect_timeout() == rayrun.CONNECT_TIMEOUT_S == 30.0
    monkeypatch.setenv(rayrun.CONNECT_TIMEOUT_ENV, "2.5")
    assert rayrun.connect_timeout() == 2.5 and rayrun.connect_timeout(7) == 7.0
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(rayrun.CONNECT_TIMEOUT_ENV, bad)
        with pytest.raises(SpecError, match=rayrun.CONNECT_TIMEOUT_ENV):
            rayrun.connect_timeout()
    with pytest.raises(SpecError, match="connect_timeout_s"):
        rayrun.connect_timeout(0)


def test_a_ray_runtime_with_an_unreachable_address_fails_fast_with_the_address(tmp_path):
    pytest.importorskip("ray")
    from pearl_core.runtime.config import RunConfig, StopCriteria

    cfg = RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", log_dir=str(tmp_path / "run"),
                    stop=StopCriteria(max_env_steps=1000))
    address = f"127.0.0.1:{_free_port()}"
    rt = rayrun.RayRuntime(cfg, address=address, connect_timeout_s=2, progress=False, plot=False, tensorboard=False)
    t = time.monotonic()
    with pytest.raises(SpecError, match="cannot connect to the Ray cluster") as err:
        rt.run()
    assert time.monotonic() - t < 20 and address in str(err.value)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
