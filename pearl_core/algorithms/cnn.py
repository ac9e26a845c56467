"""Image observations: channel order and scale handled once, and the convolutional encoders.

:class:`ImageInput` reads an image ``Box`` once: its channel order (PEARL's
environment presets give channels first, ``(C, H, W)``; a ``(H, W, C)`` space,
whose last axis is the smallest, is read channels last and transposed) and its
scale (``1 / high`` for a ``uint8`` space with ``high`` > 1, e.g. 1/255; none for
MinAtar's 0/1 grids). Observations stay in their stored dtype (``uint8``) until
:meth:`ImageInput.tensor` puts them on the learner's device, where they become
``float32`` and are scaled: the batch crosses to the device at a quarter of the
float size.

Encoders (:func:`conv_encoder`):

* ``"nature"`` (images of 36x36 and larger): the Nature-DQN stack (Mnih et al.
  2015): 32 8x8 filters with stride 4, 64 4x4 stride 2, 64 3x3 stride 1, ReLU after
  each; on 84x84 inputs that is 64 x 7 x 7 = 3136 features.
* ``"small"`` (smaller images, MinAtar's 10x10): one 3x3 convolution with 16 filters
  and stride 1, then ReLU (the MinAtar paper's network, Young & Tian 2019).

The fully connected head after the encoder is the trainer's (``hidden_sizes``:
512 for ``"nature"``, 128 for ``"small"`` by default).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from pearl_core.errors import SpecError

__all__ = ["ImageInput", "conv_encoder", "default_head"]

#: Smallest side the Nature-DQN stack takes (8x8/4 -> 4x4/2 -> 3x3/1 leaves at least one position).
NATURE_MIN_SIDE = 36


class ImageInput:
    """How an image observation space reaches a convolutional network (see the module docstring).

    Attributes:
        chw: the ``(C, H, W)`` shape the network sees.
        channels_last: the space is ``(H, W, C)`` and is transposed.
        scale: the factor applied to the values (``1.0``: none).
    """

    def __init__(self, space: Any, owner: str):
        shape = tuple(int(d) for d in space.shape)
        if len(shape) != 3:
            raise SpecError(f"{owner}: a convolutional encoder needs a 3-D image observation space; found shape "
                            f"{shape}. Fix: encoder='mlp', or an image environment.")
        self.channels_last = shape[-1] < shape[0]
        self.chw = (shape[2], shape[0], shape[1]) if self.channels_last else shape
        high = np.asarray(space.high, dtype=np.float64)
        top = float(high.max()) if high.size else 1.0
        integer = np.issubdtype(space.dtype, np.integer)
        self.scale = 1.0 / top if integer and np.isfinite(top) and top > 1.0 else 1.0

    def tensor(self, obs: Any, device: torch.device) -> torch.Tensor:
        """``(n, C, H, W)`` ``float32`` on ``device``, scaled; a numpy array or a tensor (any device).

        A tensor on ``device`` (a device batch's ``uint8`` frames) is converted and scaled there, with no
        host synchronisation; the caller's tensor or array is never written (a device batch's buffers
        are reused)."""
        t = obs if isinstance(obs, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(obs))
        t = t.to(device, non_blocking=True)
        if self.channels_last:
            t = t.permute(0, 3, 1, 2)
        converted = t.dtype != torch.float32
        t = t.to(torch.float32)
        if self.scale == 1.0:
            return t
        # in place only on the float copy just made: float32 input would be the caller's own memory
        return t.mul_(self.scale) if converted else t.mul(self.scale)


def conv_encoder(chw: tuple[int, int, int], kind: str = "auto") -> tuple[nn.Sequential, int, str]:
    """``(encoder ending in Flatten, its output features, the kind used)`` for ``(C, H, W)`` inputs.

    ``kind``: ``"nature"``, ``"small"`` or ``"auto"`` (``"nature"`` when both sides are at
    least :data:`NATURE_MIN_SIDE`, else ``"small"``).
    """
    c, h, w = chw
    if kind == "auto":
        kind = "nature" if min(h, w) >= NATURE_MIN_SIDE else "small"
    if kind == "nature":
        if min(h, w) < NATURE_MIN_SIDE:
            raise SpecError(f"the Nature-DQN encoder needs images of at least {NATURE_MIN_SIDE}x{NATURE_MIN_SIDE}; "
                            f"found {h}x{w}. Fix: encoder='cnn' (picks the small encoder for small images).")
        enc = nn.Sequential(nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
    elif kind == "small":
        if min(h, w) < 3:
            raise SpecError(f"the small convolutional encoder needs images of at least 3x3; found {h}x{w}.")
        enc = nn.Sequential(nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Flatten())
    else:
        raise SpecError(f"conv encoder kind {kind!r} is unknown; expected 'auto', 'nature' or 'small'.")
    with torch.no_grad():
        features = int(enc(torch.zeros(1, c, h, w)).shape[1])
    return enc, features, kind


def default_head(kind: str) -> tuple[int, ...]:
    """The fully connected hidden sizes after an encoder: ``(512,)`` (Nature-DQN), ``(128,)`` (MinAtar)."""
    return (512,) if kind == "nature" else (128,)
