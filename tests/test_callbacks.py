"""Callbacks (pearl_core.callbacks): hooks at start, metrics rows, evaluations, checkpoints and end; a stop rule;
the best-model saver; a callback that raises (issue 41, point 6)."""

from __future__ import annotations

import math

import pytest

from pearl_core.callbacks import BestModelSaver, Callback, load_callbacks
from pearl_core.errors import CallbackError, SpecError
from pearl_core.runtime import ParallelRuntime, SerialRuntime
from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria


def config(tmp_path, **stop) -> RunConfig:
    return RunConfig(env_id="CartPole-v1", trainer="pearl_core.algorithms:DQN", batch_size=16, learning_starts=100,
                     trainer_kwargs={"hidden_sizes": [16]}, replay=ReplayConfig("uniform", capacity=2_000),
                     stop=StopCriteria(**{"max_env_steps": 1_500, **stop}), log_dir=str(tmp_path / "run"))


class Recorder(Callback):
    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.evals: list[float] = []
        self.paths = []
        self.result = None

    def on_start(self, run):
        self.calls.append(("start", run.env_steps))

    def on_step(self, run):
        self.calls.append(("step", run.env_steps))

    def on_evaluation(self, run, result):
        self.calls.append(("evaluation", result.env_steps))
        self.evals.append(result.mean_return)
        assert len(result.returns) == run.config.stop.eval_episodes and math.isfinite(result.std_return)

    def on_checkpoint(self, run, path):
        self.calls.append(("checkpoint", run.env_steps))
        self.paths.append(path)

    def on_end(self, run, result):
        self.calls.append(("end", result.env_steps))
        self.result = result


@pytest.mark.parametrize("runtime", ["serial", "parallel"])
def test_every_hook_is_called_in_order_and_the_best_policy_is_kept(tmp_path, runtime):
    from pearl_core import load_policy

    rec, best = Recorder(), BestModelSaver()
    cfg = config(tmp_path, eval_every=500, eval_episodes=2)
    kw = dict(progress=False, plot=False, tensorboard=False, metrics_every=500, callbacks=[rec, best])
    rt = SerialRuntime(cfg, **kw) if runtime == "serial" else ParallelRuntime(cfg, RuntimePlan(), **kw)
    result = rt.run()
    kinds = [k for k, _ in rec.calls]
    assert kinds[0] == "start" and kinds[-1] == "end" and rec.result.env_steps == result.env_steps
    assert kinds.count("evaluation") == 3 and kinds.count("step") >= 3 and kinds[-2] in ("step", "checkpoint")
    assert rec.paths and rec.paths[-1] == tmp_path / "run" / "checkpoint.pt"
    assert best.best == max(rec.evals) and best.saved == tmp_path / "run" / "best_model.pt"
    policy = load_policy(best.saved)  # a checkpoint of the policy evaluated best
    assert policy.env_id == "CartPole-v1"


def test_a_callback_stops_the_run(tmp_path):
    class StopAtFirstEvaluation(Callback):
        def on_evaluation(self, run, result):
            return run.stop(f"evaluated at {result.env_steps}")

    result = SerialRuntime(config(tmp_path, eval_every=400, max_env_steps=5_000), progress=False, plot=False,
                           tensorboard=False, callbacks=[StopAtFirstEvaluation()]).run()
    assert result.stop_reason == "callback" and "evaluated at 400" in result.stop_detail
    assert 400 <= result.env_steps < 5_000


def test_a_raising_callback_stops_the_run_with_an_error_naming_it_after_a_checkpoint(tmp_path):
    class Broken(Callback):
        def on_step(self, run):
            if run.env_steps >= 1_000:
                raise RuntimeError("boom")

    with pytest.raises(CallbackError, match=r"Broken.on_step raised RuntimeError: boom.*Fix"):
        SerialRuntime(config(tmp_path, max_env_steps=3_000), progress=False, plot=False, tensorboard=False,
                      metrics_every=500, callbacks=[Broken()]).run()
    assert (tmp_path / "run" / "checkpoint.pt").is_file()  # what is sound is kept


def test_bad_callbacks_are_refused_before_the_run(tmp_path):
    with pytest.raises(SpecError, match="none of the methods"):
        load_callbacks([object()])
    with pytest.raises(SpecError, match="expected 'package.module:Name'"):
        load_callbacks(["nocolon"])
    with pytest.raises(SpecError, match="cannot be made"):
        load_callbacks(["no_such_module_q:Thing"])
    assert isinstance(load_callbacks(["pearl_core.callbacks:BestModelSaver"])[0], BestModelSaver)
    with pytest.raises(SpecError, match="needs evaluations"):  # no eval_every, no eval_return
        SerialRuntime(config(tmp_path), progress=False, callbacks=[BestModelSaver()])
    assert not (tmp_path / "run").exists()
