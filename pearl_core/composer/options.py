"""The :class:`Composer` that the composer's commands build from their options.

``pearl plan``, ``pearl compose`` and ``pearl validate`` all compose through
:func:`composer_from_options` and :meth:`Composer.run`, so the same flags give the
same plan (and plan hash) whichever command printed it.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from pearl_core.composer.api import Composer
from pearl_core.composer.workload import hidden_layers
from pearl_core.errors import PearlError

__all__ = ["composer_from_options", "parse_trainer_kwargs"]


def composer_from_options(o: dict[str, Any]) -> Composer:
    """A :class:`Composer` set up from ``pearl plan``'s options plus ``replay_ratio``, ``learning_starts`` and
    ``n_step`` (default 1 where a command has no ``--n-step``).

    Shared by ``pearl plan``, ``pearl compose`` and ``pearl validate`` (so the same flags plan the same);
    raises :class:`PearlError` on bad options.
    """
    composer = Composer(o["hardware"], o["metric"], emulated=bool(o.get("emulated", False)))
    composer.set_actors(o["env_id"], o["n_actors"], envs_per_actor=o["envs_per_actor"], insert_batch=o["insert_batch"],
                        vector_backend=o.get("vector_backend"))
    kwargs = parse_trainer_kwargs(o["trainer_kwargs"]) or {}
    from pearl_core.algorithms.defaults import default_trainer, hidden_kwargs  # torch loads only when used

    if o["trainer"]:
        from pearl_core.runtime.wiring import load_trainer_class

        trainer = load_trainer_class(o["trainer"])
    else:
        assert composer._spaces is not None  # set by set_actors above
        trainer = default_trainer(composer._spaces[1])
    if o["hidden"] is not None:
        kwargs.update(hidden_kwargs(trainer, list(hidden_layers(o["hidden"]))))
    composer.set_train_function(trainer, o["batch_size"], replay_ratio=o["replay_ratio"],
                                learning_starts=o["learning_starts"], **kwargs)
    composer.set_replay(o["replay"], o["capacity"], o["fanout"], n_step=o.get("n_step", 1))
    return composer


def parse_trainer_kwargs(text: Optional[str]) -> Optional[dict]:
    """The ``--trainer-kwargs`` JSON object (``None`` when not given), or a :class:`PearlError`."""
    if not text:
        return None
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PearlError(f"--trainer-kwargs is not valid JSON ({exc}).") from None
    if not isinstance(kwargs, dict):
        raise PearlError(f"--trainer-kwargs = {text!r}; expected a JSON object such as '{{\"lr\": 0.001}}'.")
    return kwargs
