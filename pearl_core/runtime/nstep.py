"""n-step returns where transitions are produced: each environment's last ``n`` one-step transitions
become one n-step transition (``ReplayConfig.n_step``).

The :class:`~pearl_core.runtime.acting.Collector` (the serial runtime's and every actor's loop body)
runs its steps through an :class:`NStepAggregator`, so every runtime and every replay (uniform or
prioritized) stores the same n-step transitions, and the learner discounts each one's bootstrap with
``gamma ** k`` (:attr:`pearl_core.replay.storage.Batch.steps`).
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from pearl_core.errors import SpecError

__all__ = ["NStepAggregator"]


class NStepAggregator:
    """Each environment's last ``n`` one-step transitions, emitted as n-step transitions.

    For environment ``i`` it keeps the pending ``(s_t, a_t, r_t, s_{t+1})`` of the
    current episode, oldest first. When ``n`` are pending the oldest leaves as
    ``(s_t, a_t, R_t = sum_{j<n} gamma^j r_{t+j}, s_{t+n}, done=False, k=n)``. When
    the episode ends every pending one leaves, the oldest first, with ``k < n`` for
    all but possibly the first: ``terminated`` gives ``done=True`` (no bootstrap),
    a truncation ``done=False`` (the learner bootstraps from the true final
    observation with ``gamma ** k``). Every step enters exactly one transition as
    its first step, so nothing is lost or duplicated. ``R_t`` is summed in float64,
    oldest reward first, and stored as float32.

    A step dropped for NaN/inf (``on_nonfinite="drop"``) breaks its environment's
    window: the pending ones leave as if truncated at the last good observation
    (:meth:`push` ``broken``). :meth:`flush` empties every window the same way; the
    serial runtime calls it at the end of a run so the replay (and the final
    checkpoint) holds every step taken.

    ``gamma`` is the trainer's (``trainer.gamma``): the same the learner discounts the
    bootstrap with, ``gamma ** k`` (:attr:`~pearl_core.replay.storage.Batch.steps`).

    Args:
        n_step: ``n >= 1``; ``1`` passes transitions through unchanged.
        n_envs: environments, indexed ``0 .. n_envs - 1``.
    """

    def __init__(self, n_step: int, n_envs: int):
        if isinstance(n_step, bool) or not isinstance(n_step, (int, np.integer)) or n_step < 1:
            raise SpecError(f"NStepAggregator: n_step = {n_step!r}; expected an int >= 1. Fix: e.g. n_step=3.")
        self.n = int(n_step)
        self._pending: list[collections.deque] = [collections.deque() for _ in range(int(n_envs))]

    def pending(self) -> int:
        """One-step transitions waiting in the windows (not yet emitted)."""
        return sum(len(d) for d in self._pending)

    def push(self, gamma: float, env_index: Sequence[int], obs, action, reward, next_obs, terminated,
             ended, broken: Sequence[int] = ()) -> tuple[list, ...]:
        """Add one step's transitions; return the n-step ones whose window closed, as row lists.

        Args:
            gamma: the discount.
            env_index: the environment of each row.
            obs, action, reward, next_obs, terminated: the one-step rows.
            ended: per row, whether the episode ended (terminated or truncated) at this step.
            broken: environments whose step was dropped: their windows are flushed (truncated) first.

        Returns:
            ``(obs, action, reward, next_obs, done, steps)`` lists of rows, in environment order
            (the order of ``broken``, then of the rows), oldest first within an environment.
        """
        out: tuple[list, ...] = ([], [], [], [], [], [])
        for i in broken:
            self._emit(out, self._pending[i], gamma, None, False, all_of=True)
        for j, i in enumerate(env_index):
            d = self._pending[i]
            d.append((obs[j], np.array(action[j]), float(reward[j]), next_obs[j]))
            if ended[j]:
                self._emit(out, d, gamma, next_obs[j], bool(terminated[j]), all_of=True)
            elif len(d) == self.n:
                self._emit(out, d, gamma, next_obs[j], False, all_of=False)
        return out

    def flush(self, gamma: float) -> tuple[list, ...]:
        """Empty every window as if its episode were truncated now; return the rows as :meth:`push` does."""
        out: tuple[list, ...] = ([], [], [], [], [], [])
        for d in self._pending:
            self._emit(out, d, gamma, None, False, all_of=True)
        return out

    @staticmethod
    def _emit(out, d: collections.deque, gamma: float, last_obs, done: bool, *, all_of: bool) -> None:
        if not d:
            return
        if last_obs is None:
            last_obs = d[-1][3]
        while d:
            total, g = 0.0, 1.0
            for entry in d:
                total += g * entry[2]
                g *= gamma
            s, a = d[0][0], d[0][1]
            for col, value in zip(out, (s, a, total, last_obs, done, len(d))):
                col.append(value)
            d.popleft()
            if not all_of:
                return
