"""Hook implementations of the FPGA backend plugin (nothing else lives here)."""

from pearl_core.hookspecs import hookimpl

#: The plugin contract version this plugin was written against (pearl_core.hookspecs.PLUGIN_API_VERSION).
PEARL_PLUGIN_API = "1.1"


@hookimpl
def pearl_register_backends(register):
    from pearl_fpga.backend import FpgaBackend

    register(FpgaBackend)
