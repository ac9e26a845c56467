"""What ``ReplayConfig.frame_storage="auto"`` means for one run: frame storage only for real frame stacks.

The shape rule (:func:`~pearl_core.replay.frames.frame_storage_fits`: ``(F, H, W)`` integers, ``F >= 2``,
sides of at least 32) cannot tell a stack of ``F`` frames from a single ``F``-channel image (an RGB
observation, channels first). A frame pool holds stacks at most 2 frames per transition
(:data:`~pearl_core.replay.frames.MAX_FRAMES_PER_TRANSITION`, what the start-up memory check counts) and
refuses content beyond that in its first adds. So before a run places its Data Storage, "auto" looks at
what the environment returns: one reset and a few random steps, and a stack is an observation whose
frames ``1..F-1`` are the previous observation's ``0..F-2`` shifted by one (``next_obs[:-1] ==
obs[1:]``, the order gymnasium's ``FrameStackObservation`` keeps). Anything else runs with the plain
storage, and the choice is logged. The answer is kept per environment and options in this process.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import numpy as np

__all__ = ["PROBE_STEPS", "frames_are_stacked", "resolve_frame_storage"]

log = logging.getLogger(__name__)

#: Transitions the probe looks at.
PROBE_STEPS = 4


def resolve_frame_storage(config: Any) -> str:
    """``"on"`` or ``"off"`` for a :class:`~pearl_core.runtime.config.RunConfig`'s ``replay.frame_storage``:
    ``"auto"`` is ``"on"`` where the observations have a frame stack's shape and the environment's
    observations are stacks (:func:`frames_are_stacked`)."""
    mode = config.replay.frame_storage
    if mode != "auto":
        return mode
    from pearl_core.envs import env_spaces
    from pearl_core.replay.frames import frame_storage_fits
    from pearl_core.replay.storage import StorageSpec

    if not frame_storage_fits(StorageSpec.from_spaces(*env_spaces(config.env_id, **config.env_options))):
        return "off"
    options = json.dumps(config.env_options, sort_keys=True, default=str)
    stacked = frames_are_stacked(config.env_id, options)
    if not stacked:
        log.info("frame_storage='auto': %s's observations have a frame stack's shape but are not stacks of frames "
                 "(next_obs[:-1] != obs[1:]): the Data Storage stores whole observations", config.env_id)
    return "on" if stacked else "off"


@functools.lru_cache(maxsize=32)
def frames_are_stacked(env_id: str, options_json: str) -> bool:
    """Whether ``env_id`` (with the JSON of its ``env_options``) returns frame stacks: every probed transition's
    ``next_obs[:-1]`` equals its ``obs[1:]`` (``True`` too when the environment cannot be probed here: the
    shape rule then decides, as before)."""
    from pearl_core.envs import make_env

    try:
        env = make_env(env_id, **json.loads(options_json))
        try:
            obs, _ = env.reset(seed=0)
            env.action_space.seed(0)
            for _ in range(PROBE_STEPS):
                nxt, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if not np.array_equal(np.asarray(nxt)[:-1], np.asarray(obs)[1:]):
                    return False
                obs = nxt if not (terminated or truncated) else env.reset()[0]
        finally:
            env.close()
    except Exception as exc:  # noqa: BLE001 - an env that cannot be probed here: the shape rule decides
        log.info("frame_storage='auto': could not probe %s (%s: %s); its observations' shape decides (frame "
                 "storage; a pool refuses content that is not a stack in its first adds)", env_id,
                 type(exc).__name__, exc)
    return True
