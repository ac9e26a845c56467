"""A new run never replaces an old one: numbered run directories.

A run writes its logs, checkpoint and results into ``RunConfig.log_dir``. When
that directory already holds an earlier run (any of the files a run writes:
:data:`RUN_FILES`) and the new run is not resuming that run, the new run goes to
the first free numbered sibling instead, ``<log_dir>-2``, ``<log_dir>-3``, ...
(the way rl-baselines3-zoo numbers its runs), and says so. The earlier run's
files are never opened for writing.

* :func:`holds_run` — whether a directory holds a run's files.
* :func:`fresh_log_dir` — ``log_dir`` itself when it holds no run, else the first
  numbered sibling that holds none.

A directory another *live* run holds is refused instead
(:func:`pearl_core.runtime.runlock.check_free`), before this is asked.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pearl_core.runtime.checkpoint import CHECKPOINT_NAME

__all__ = ["RUN_FILES", "fresh_log_dir", "holds_run", "same_dir"]

log = logging.getLogger("pearl_core.runtime")

#: Files a run writes into its log directory; one of them there means the directory holds a run.
RUN_FILES = (CHECKPOINT_NAME, "config.json", "plan.json", "episodes.csv", "evals.csv", "metrics.csv",
             "result.json", "composer_plan.json")
#: Numbered siblings tried before giving up (a directory of 10,000 runs is a mistake, not a history).
_MAX_RUNS = 10_000


def holds_run(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` holds any of a run's files (:data:`RUN_FILES`)."""
    p = Path(path)
    return p.is_dir() and any((p / name).exists() for name in RUN_FILES)


def same_dir(a: str | os.PathLike[str] | None, b: str | os.PathLike[str] | None) -> bool:
    """Whether ``a`` and ``b`` name the same directory (after resolving links and ``..``)."""
    if a is None or b is None:
        return False
    return Path(a).resolve() == Path(b).resolve()


def fresh_log_dir(log_dir: str) -> str:
    """``log_dir`` when it holds no run, else the first ``<log_dir>-<n>`` (``n >= 2``) that holds none.

    Logs a warning naming both directories when it moves the run. The returned
    directory may not exist yet (the run creates it).
    """
    if not holds_run(log_dir):
        return log_dir
    base = log_dir.rstrip("/\\") or log_dir
    for n in range(2, _MAX_RUNS):
        candidate = f"{base}-{n}"
        if not holds_run(candidate):
            log.warning("log_dir %r holds an earlier run; this run writes to %r instead (the earlier run's files are "
                        "kept; to continue that run, resume it from its checkpoint)", log_dir, candidate)
            return candidate
    from pearl_core.errors import SpecError

    raise SpecError(f"RunConfig.log_dir = {log_dir!r} and its numbered siblings {base}-2 ... {base}-{_MAX_RUNS - 1} "
                    "all hold runs. Fix: choose another log_dir (or move the old runs away).")
