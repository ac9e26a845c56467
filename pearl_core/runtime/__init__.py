"""The runtime: actors, learner, replay and the host protocol that connects them."""

from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria

__all__ = ["ReplayConfig", "RunConfig", "RuntimePlan", "StopCriteria"]
