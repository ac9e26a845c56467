"""The composer: hardware spec, Primitive Device Assignment Matrix, Algorithm 1, and the plan."""

from pearl_core.composer.spec import DeviceSpec, HardwareSpec, LinkSpec, load_spec

__all__ = ["DeviceSpec", "HardwareSpec", "LinkSpec", "load_spec"]
