"""Episodes of a trained policy as mp4 files (``pearl eval --video DIR``).

:func:`record_episodes` plays ``n_episodes`` episodes with a
:class:`~pearl_core.policy.Policy`, episode ``k`` from ``reset(seed=seed + k)``
exactly as :func:`~pearl_core.evaluate_policy` seeds them (so the returns are
the same for deterministic actions), renders every frame
(``render_mode="rgb_array"``) and streams it to ``DIR/episode-<k>.mp4``
(H.264 through the ffmpeg that ``imageio-ffmpeg`` ships; ``pip install
'pearl-core[video]'``). Frames are written as they come, so a long episode does
not sit in memory; each file is written under a temporary name and renamed
when complete, so a failed episode leaves no half-written mp4.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from pearl_core.errors import InvalidValueError, SpecError

__all__ = ["record_episodes"]


def _writer_module():
    try:
        import imageio_ffmpeg
    except ImportError as exc:
        raise SpecError("writing videos needs the package 'imageio-ffmpeg', which is not installed. Fix: "
                        "pip install 'pearl-core[video]' (or pip install imageio-ffmpeg).") from exc
    return imageio_ffmpeg


def _frame(env: Any, env_id: str) -> np.ndarray:
    frame = env.render()
    arr = np.asarray(frame) if frame is not None else None
    if arr is None or arr.ndim != 3 or arr.shape[2] not in (3, 4):
        shape = None if arr is None else arr.shape
        raise SpecError(f"environment {env_id!r} rendered {shape} with render_mode='rgb_array'; expected an RGB "
                        "image (height, width, 3). Fix: record an environment that renders RGB frames.")
    if arr.shape[2] == 4:
        arr = arr[:, :, :3]
    h, w = arr.shape[:2]
    if h % 2 or w % 2:  # yuv420p needs even sizes: pad one black row/column
        arr = np.pad(arr, ((0, h % 2), (0, w % 2), (0, 0)))
    return np.ascontiguousarray(arr.astype(np.uint8, copy=False))


def record_episodes(policy: Any, video_dir: str | os.PathLike[str], *, n_episodes: int = 1, seed: int = 0,
                    deterministic: bool = True, env_id: str | None = None, fps: int | None = None
                    ) -> tuple[float, float, list[Path]]:
    """Play and record ``n_episodes`` episodes; ``(mean, std, files)`` of their undiscounted returns.

    Args:
        policy: what :func:`pearl_core.load_policy` returned.
        video_dir: where ``episode-<k>.mp4`` go (created if missing).
        n_episodes, seed, deterministic: as :func:`pearl_core.evaluate_policy`.
        env_id: the environment (default: the policy's run's, with its env options).
        fps: frames per second (default: the env's ``render_fps``, else 30).

    Raises:
        InvalidValueError: bad arguments, or an env whose spaces differ from the policy's.
        SpecError: the env cannot be made or rendered, or no video writer is installed.
    """
    from pearl_core.envs import make_env
    from pearl_core.policy import Policy, check_env_fits

    if not isinstance(policy, Policy):
        raise InvalidValueError(f"record_episodes: policy = {type(policy).__name__}; expected a Policy. Fix: "
                                "policy = pearl_core.load_policy(run_dir).")
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
        raise InvalidValueError(f"record_episodes: n_episodes = {n_episodes!r}; expected an int >= 1.")
    writer = _writer_module()
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame-rendered envs draw off-screen, without a display
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    run_env = env_id is None or env_id == policy.env_id
    env_id = policy.env_id if env_id is None else env_id
    if env_id is None:
        raise InvalidValueError("record_episodes: no env_id given and the policy has none. Fix: pass env_id=...")
    cfg = policy.config if run_env else None
    kwargs = dict(cfg.env_kwargs) if cfg is not None else {}
    kwargs["render_mode"] = "rgb_array"
    wrappers = cfg.env_wrappers if cfg is not None else None
    out = Path(video_dir)
    out.mkdir(parents=True, exist_ok=True)
    returns: list[float] = []
    files: list[Path] = []
    for k in range(n_episodes):
        env = make_env(env_id, seed + k, kwargs=kwargs, wrappers=wrappers, evaluation=True)
        path = out / f"episode-{k}.mp4"
        tmp = out / f".episode-{k}.partial.mp4"
        try:
            check_env_fits(policy, env, env_id, "record_episodes")
            rate = fps or int(env.metadata.get("render_fps") or 30)
            obs, _ = env.reset(seed=seed + k)
            frame = _frame(env, env_id)
            gen = writer.write_frames(str(tmp), (frame.shape[1], frame.shape[0]), fps=rate, macro_block_size=1,
                                      codec="libx264", pix_fmt_out="yuv420p", quality=7)
            gen.send(None)
            try:
                gen.send(frame)
                total, done = 0.0, False
                while not done:
                    obs, reward, terminated, truncated, _ = env.step(policy.predict(obs, deterministic))
                    total += float(reward)
                    done = bool(terminated or truncated)
                    gen.send(_frame(env, env_id))
            finally:
                gen.close()
            os.replace(tmp, path)
        finally:
            env.close()
            if tmp.exists():
                tmp.unlink()
        returns.append(total)
        files.append(path)
    arr = np.asarray(returns, dtype=np.float64)
    return float(arr.mean()), float(arr.std()), files
