"""Hook implementations of the FPGA backend plugin (nothing else lives here)."""

from pearl_core.hookspecs import hookimpl


@hookimpl
def pearl_register_backends(register):
    from pearl_fpga.backend import FpgaBackend

    register(FpgaBackend)
