"""Every runtime ends cleanly with a checkpoint on SIGINT, SIGTERM and SIGHUP (issue 43).

The serial runtime used to die on SIGTERM/SIGHUP (and raise KeyboardInterrupt on Ctrl-C) without a checkpoint;
a parallel run's host died on SIGHUP without one. Handlers are installed only in the main thread and the
previous ones are put back afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pearl_core.callbacks import Callback
from pearl_core.runtime.checkpoint import load_checkpoint
from pearl_core.runtime.config import ReplayConfig, RunConfig, StopCriteria
from pearl_core.runtime.procs import STOP_SIGNALS, install_stop_handlers, restore_stop_handlers
from pearl_core.runtime.serial import SerialRuntime
from pearl_core.runtime.shm import list_segments

from conftest import HELPERS
from cpu_backend import needs_cpu_backend



class _SignalAt(Callback):
    """Sends ``sig`` to this process once the run has taken ``at`` env steps."""

    def __init__(self, sig, at):
        self.sig, self.at, self.sent_at = sig, at, None

    def on_step(self, run):
        if self.sent_at is None and run.env_steps >= self.at:
            self.sent_at = run.env_steps
            os.kill(os.getpid(), self.sig)


def _config(tmp_path) -> RunConfig:
    return RunConfig(env_id="CartPole-v1", trainer="runtime_support:LinearQ", batch_size=16, learning_starts=32,
                     replay=ReplayConfig(capacity=8192), stop=StopCriteria(max_env_steps=5_000),
                     log_dir=str(tmp_path / "run"), save_replay=True)


@needs_cpu_backend
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_serial_runtime_checkpoints_and_stops_cleanly_on_a_stop_signal(tmp_path, sig):
    before = signal.getsignal(sig)
    marker = lambda signum, frame: None  # noqa: E731 - a handler of the caller's, to be put back
    signal.signal(sig, marker)
    try:
        cb = _SignalAt(sig, 200)
        res = SerialRuntime(_config(tmp_path), progress=False, plot=False, tensorboard=False, metrics_every=50,
                            callbacks=[cb]).run()
        assert cb.sent_at is not None
        assert res.stop_reason == "interrupted" and signal.Signals(sig).name in res.stop_detail
        assert res.env_steps < 5_000  # (without the handlers: a budget stop, the signal ignored by the marker)
        ck = load_checkpoint(res.checkpoint_path)
        assert ck.state.env_steps == res.env_steps and ck.replay["size"] == res.env_steps
        assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") > 1
        assert signal.getsignal(sig) is marker  # the caller's handler is back
    finally:
        signal.signal(sig, before)


def test_stop_handlers_cover_sighup_and_only_in_the_main_thread():
    assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= set(STOP_SIGNALS)

    class Target:
        interrupted = interrupted_at = None

    got = {}
    t = threading.Thread(target=lambda: got.update(h=install_stop_handlers(Target())))
    t.start()
    t.join()
    assert got["h"] == {}  # not the main thread: nothing installed
    target = Target()
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    handlers = install_stop_handlers(target)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        deadline = time.monotonic() + 5
        while target.interrupted is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert target.interrupted == "SIGHUP" and target.interrupted_at is not None
    finally:
        restore_stop_handlers(handlers)
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


PARALLEL = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, StopCriteria
    from pearl_core.runtime.parallel import ParallelRuntime

    if __name__ == "__main__":
        cfg = RunConfig(env_id="CartPole-v1", trainer="runtime_support:LinearQ", batch_size=16,
                        learning_starts=32, replay=ReplayConfig(capacity=4096),
                        stop=StopCriteria(max_env_steps=10_000_000), log_dir={log_dir!r}, save_replay=True)
        plan = RuntimePlan(setting=1, n_actors=1, envs_per_actor=1, insert_batch=8, queue_size=4)
        res = ParallelRuntime(cfg, plan, progress=False, plot=False, tensorboard=False, metrics_every=16).run()
        print("RESULT", res.stop_reason, res.env_steps, res.checkpoint_path, flush=True)
    """
)


@pytest.mark.slow  # several seconds on 2 cores: `make test` runs it, `make test-fast` does not
@needs_cpu_backend
def test_sighup_to_a_parallel_runs_host_ends_it_with_a_checkpoint(tmp_path):
    log_dir = tmp_path / "run"
    script = tmp_path / "hup.py"
    script.write_text(PARALLEL.format(here=HELPERS, log_dir=str(log_dir)))
    # Its own session, like a job whose terminal closes: SIGHUP to the whole process group.
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (log_dir / "metrics.csv").exists() or (log_dir / "metrics.csv").read_text().count("\n") < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never started training"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGHUP)  # the workers ignore it; the host ends the run
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    _, reason, env_steps, path = [ln for ln in out.splitlines() if ln.startswith("RESULT")][0].split()
    assert reason == "interrupted"
    ck = load_checkpoint(path)
    assert ck.state.env_steps == int(env_steps) > 0 and ck.replay["size"] == int(env_steps)
    assert list_segments(proc.pid) == []
