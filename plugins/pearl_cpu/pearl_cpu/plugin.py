"""Hook implementations of the CPU backend plugin (nothing else lives here)."""

from pearl_core.hookspecs import hookimpl


@hookimpl
def pearl_register_backends(register):
    from pearl_cpu.backend import CpuBackend

    register(CpuBackend)
