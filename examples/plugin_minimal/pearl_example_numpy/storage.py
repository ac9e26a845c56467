"""The example's Data Storage: the core's ring buffer, resident on the pretend device.

A ``numpy`` device's memory is host memory, so the core's
:class:`~pearl_core.replay.storage.DataStorage` is used as it is; only its
``device`` says where it lives. A real accelerator's storage also implements
the public storage contract: ``allocate`` (device buffers), ``store`` (writes of
validated rows), ``gather_into`` (reads into a
:class:`~pearl_core.replay.storage.Batch`, or the caller's ``out`` arrays) and
``field`` (a host copy).
"""

from pearl_core.sdk import DataStorage


class NumpyStorage(DataStorage):
    def __init__(self, spec, capacity, device):
        super().__init__(spec, capacity)
        self.device = device
