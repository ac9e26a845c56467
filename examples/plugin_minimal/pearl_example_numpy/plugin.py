from pearl_core.hookspecs import hookimpl

#: The plugin contract version this plugin was written against: a literal, never the core's constant.
PEARL_PLUGIN_API = "1.1"


@hookimpl
def pearl_register_backends(register):
    from pearl_example_numpy.backend import NumpyExampleBackend

    register(NumpyExampleBackend)
