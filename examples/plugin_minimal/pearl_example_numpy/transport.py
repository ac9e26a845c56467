"""The example's LAQ/LDQ transport: the core's PipeQueue, counting every message put."""

from pearl_core.errors import InvalidValueError
from pearl_core.sdk import PipeQueue

from pearl_example_numpy import counters

ROLES = ("laq", "ldq")


class CountingQueue(PipeQueue):
    """A :class:`~pearl_core.runtime.queues.PipeQueue` that counts each message put under its role.

    The counts go to the host's counter block (:mod:`pearl_example_numpy.counters`), which the
    queue carries into the process it is sent to.
    """

    def __init__(self, role, maxsize, ctx=None):
        if role not in ROLES:
            raise InvalidValueError(f"numpy-example transport: role = {role!r}; expected one of {list(ROLES)}. "
                                    "Fix: ask for the host -> learner queue 'laq' or the learner -> host one 'ldq'.")
        super().__init__(maxsize, ctx)
        self.role = role
        self._counters = counters.block()

    def __getstate__(self):
        return {**super().__getstate__(), "role": self.role, "_counters": self._counters}

    def __setstate__(self, state):
        super().__setstate__(state)
        counters.adopt(self._counters)  # the receiving process counts in the host's block

    def put(self, item, block=True, timeout=None):
        super().put(item, block, timeout)  # raises queue.Full (nothing counted) when there is no room
        counters.count(f"{self.role}_messages", shared=self._counters)
