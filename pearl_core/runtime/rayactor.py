"""The body of one actor of the Ray runtime (:mod:`pearl_core.runtime.rayrun`).

A plain class, turned into a Ray actor class by the runtime (``ray.remote(RayActorBody)``),
so this module imports nothing of Ray and can be read and tested without it. One actor
steps ``n_envs`` environments together with the serial runtime's
:class:`~pearl_core.runtime.acting.Collector` and its own trainer copy, exactly as an
actor process of the parallel runtime does; one call of :meth:`RayActorBody.collect`
takes ``n_steps`` steps of every environment and returns the rows in one batch (no
per-transition call)::

    actor = ray.remote(RayActorBody).options(...).remote(config, actor_id, incarnation, ...)
    out = ray.get(actor.collect.remote([weights_ref], version, env_steps, n_steps))

The weights come *by reference*: the host publishes them once with ``ray.put`` and every
call carries that reference inside a list (so Ray does not resolve it), and the actor
fetches the object only when its version is newer than the one it holds.

Environment ``j`` of actor ``i`` (incarnation ``k``) is reset with the seeds of
:func:`~pearl_core.runtime.actors.actor_seeds`: one actor replays the serial runtime's
environments exactly, and a restarted actor never replays its predecessor's episodes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from pearl_core.runtime.acting import Collector
from pearl_core.runtime.actors import actor_seeds
from pearl_core.runtime.config import RunConfig
from pearl_core.runtime.vector import make_vector_envs
from pearl_core.runtime.wiring import build_trainer, load_trainer_class

__all__ = ["RayActorBody"]


class RayActorBody:
    """One Ray actor: ``n_envs`` environments, a trainer copy for ``get_action``.

    Args:
        config: the run's config.
        actor_id, incarnation, n_actors, n_envs, offset: as :func:`~pearl_core.runtime.actors.actor_seeds`.
        vector_backend: how the environments are stepped (``RuntimePlan.vector_backend``).
    """

    def __init__(self, config: RunConfig, actor_id: int, incarnation: int, n_actors: int, n_envs: int,
                 offset: int, vector_backend: str):
        import torch

        torch.set_num_threads(1)  # one core per actor; the learner has its own
        env_seeds, trainer_seed = actor_seeds(config, actor_id, incarnation, n_actors, n_envs, offset)
        # The trainer's module first: a package that registers its environments on import works here too.
        load_trainer_class(config.trainer)
        envs = make_vector_envs(vector_backend, config.env_id, env_seeds, config.env_options)
        try:
            self.collector = Collector(envs, env_seeds, env_id=config.env_id, on_nonfinite=config.on_nonfinite,
                                       where=f"actor {actor_id}", n_step=config.replay.n_step,
                                       random_steps=config.random_steps)
            # The host checked the trainer class already; actors skip the smoke test.
            self.trainer = build_trainer(config, envs.observation_space, envs.action_space, seed=trainer_seed,
                                         check=False)
        except BaseException:
            envs.close()
            raise
        self.spaces_ = (envs.observation_space, envs.action_space)
        self.version = -1  # the weights' version held (-1: the copy's own initial weights)

    def spaces(self) -> tuple[Any, Any]:
        """The environments' (observation, action) spaces."""
        return self.spaces_

    def where(self) -> tuple[str, int]:
        """(Ray node id, process id) of this actor."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def collect(self, weights: list, version: int, env_steps: int, n_steps: int) -> dict[str, Any]:
        """Take ``n_steps`` steps of every environment with the weights of ``version``.

        Args:
            weights: ``[ref]``, the Ray object reference of the host's latest weights.
            version: that publication's number; fetched only when newer than the copy's.
            env_steps: the run's env-step count when the call was made (the exploration schedule).
            n_steps: steps of every environment to take.

        Returns: the rows (``obs``, ``action``, ``reward``, ``next_obs``, ``done``, ``steps``),
        ``episodes`` ((return, length, env steps of this call when it ended) each), ``env_steps`` taken and
        kept, ``dropped`` (the actor's total so far), ``last_drop``, and ``node`` (where this ran).

        Raises: whatever the environment or ``get_action`` raised (:class:`DataError` for a
        NaN/inf with ``on_nonfinite="stop"``): the host ends the run with it.
        """
        import ray

        if version > self.version:
            # writable copies: the object store's arrays are read-only views
            self.trainer.set_weights({k: np.array(v) for k, v in ray.get(weights[0]).items()})
            self.version = version
        cols: list[list[np.ndarray]] = [[] for _ in range(6)]
        episodes: list[tuple[float, int]] = []
        taken = 0
        for _ in range(n_steps):
            self.trainer.env_steps = env_steps + taken
            out = self.collector.step(self.trainer, explore=True)
            taken += out.env_steps
            for col, values in zip(cols, out.transition()):
                col.append(np.array(values))  # a copy: a vector back end may reuse its buffers
            episodes.extend((ep.episode_return, ep.length, taken) for ep in out.episodes)
        rows = [np.concatenate(c) for c in cols]
        return {"rows": rows, "episodes": episodes, "env_steps": taken, "dropped": self.collector.dropped,
                "last_drop": self.collector.last_drop, "node": ray.get_runtime_context().get_node_id()}

    def close(self) -> None:
        self.collector.close()
