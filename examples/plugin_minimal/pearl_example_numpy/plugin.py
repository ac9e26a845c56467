from pearl_core.hookspecs import hookimpl


@hookimpl
def pearl_register_backends(register):
    from pearl_example_numpy.backend import NumpyExampleBackend

    register(NumpyExampleBackend)
