"""Hook implementations of the CUDA backend plugin (nothing else lives here)."""

from pearl_core.hookspecs import hookimpl


@hookimpl
def pearl_register_backends(register):
    from pearl_cuda.backend import CudaBackend

    register(CudaBackend)
