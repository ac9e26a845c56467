"""Usage counters a host reads after a run: did the run really use this backend?

One block of shared integers per host process (``multiprocessing.Array``, lock
protected). The host makes it when it first needs it (its first
``make_transport``, or a call of :func:`stats`). Every queue the backend makes
carries the block, so a process that receives one (the learner, started with its
LAQ and LDQ as arguments) adopts it as its own; the kernel's steps in the learner
and the messages both sides put are then counted in the host's block::

    import pearl_example_numpy

    pearl_example_numpy.reset_stats()
    ...                                  # a run with the learner on "numpy:0"
    pearl_example_numpy.stats()          # {"kernel_steps": 96, "laq_messages": 97, "ldq_messages": 99}

A process that never receives a queue counts in a block of its own.
"""

import multiprocessing as mp

NAMES = ("kernel_steps", "laq_messages", "ldq_messages")

_block = None  # this process's block (see the module docstring)


def block():
    """This process's counter block, made on first use."""
    global _block
    if _block is None:
        _block = mp.get_context("spawn").Array("q", len(NAMES))  # int64 zeros, with a lock
    return _block


def adopt(shared):
    """Count in ``shared`` (a block that came with a queue) unless this process already has a block."""
    global _block
    if _block is None:
        _block = shared


def count(name, n=1, shared=None):
    """Add ``n`` to the counter ``name`` (one of :data:`NAMES`) of ``shared`` (default: this process's block)."""
    b = block() if shared is None else shared
    with b.get_lock():
        b[NAMES.index(name)] += n


def stats():
    """``{"kernel_steps": ..., "laq_messages": ..., "ldq_messages": ...}`` counted so far."""
    b = block()
    with b.get_lock():
        return dict(zip(NAMES, b[:]))


def reset_stats():
    """Set every counter to zero."""
    b = block()
    with b.get_lock():
        b[:] = [0] * len(NAMES)
