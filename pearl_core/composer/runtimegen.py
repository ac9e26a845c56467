"""RuntimeGen: write a composition as a readable, standalone training program.

:func:`render_program` turns a :class:`~pearl_core.composer.composition.Composition`
(the :class:`~pearl_core.composer.plan.PlacementPlan`, the
:class:`~pearl_core.runtime.config.RunConfig` it was composed for and the
:class:`~pearl_core.runtime.config.RuntimePlan` to execute) into Python source;
:func:`write_program` writes it atomically (:func:`pearl_core.fileio.atomic_write`).
The program:

* starts with a comment header: the PEARL version, the inputs (environment,
  trainer, batch, replay, hardware, metric), the plan hash and the choice;
* rebuilds ``RUN_CONFIG``, ``RUNTIME_PLAN`` and ``PLAN_JSON`` from literals and,
  under ``if __name__ == "__main__":`` (actors are spawned processes), hands them
  to the library's :func:`pearl_core.runtime.main`
  (:mod:`pearl_core.runtime.program`), so a fix there reaches programs already
  written; that ``main`` checks the chosen backends and the trainer, takes
  ``--max-env-steps``, ``--max-wall-time-s``, ``--log-dir``, ``--seed``,
  ``--resume RUN``, ``--quiet``, ``--show-plan`` and ``--ray ADDRESS``, runs
  :class:`~pearl_core.runtime.ParallelRuntime` (or the Ray runtime) and writes
  ``composer_plan.json`` and ``result.json`` into the run's directory.
  Programs written before this (with a ``main`` of their own) keep running.

**Safety.** Every value that comes from the user (environment id, trainer
path, keyword arguments, file paths, names) is emitted by :func:`literal`,
which accepts only plain ``str``/``int``/``float``/``bool``/``None`` and
lists/tuples/dicts of them (exact types, so a ``str`` subclass with its own
``__repr__`` cannot smuggle code) and writes them with the builtin ``repr``.
Header comments use :func:`ascii` so no value can end a comment line. Nothing
is ever spliced into code as raw text. The only non-literal values are the
protocol setting, written as ``Setting.<NAME>``, and the field names of our own
dataclasses.

**The embedded plan.** The full plan JSON is embedded as a string literal
(``PLAN_JSON``, one ``repr``'d line per JSON line) rather than referenced by
path: the program stays standalone (copy it to another machine, nothing is
left behind), ``--show-plan`` can print it, and the program checks its hash
against ``PLAN_HASH`` so an edited plan is reported.

**Trainers defined in the user's script.** A trainer class whose module is
``__main__`` cannot be imported by name from the generated program (nor from
its spawned workers). The program instead loads the script *file* under the
module name ``pearl_user_script`` (:func:`load_script_module`); the script's
``if __name__ == "__main__":`` block does not run then. A script whose
top-level code composes or runs (calls ``Composer``, ``RuntimeGen`` or
``.run(...)`` outside that guard) is rejected at generation time, and a class
defined interactively (no script file) or inside a function is rejected with
a fix: move it into a module.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from string import Template
from typing import Any

from pearl_core.composer.composition import USER_SCRIPT_MODULE, Composition
from pearl_core.composer.plan import pearl_version, setting_label
from pearl_core.errors import InvalidValueError, PearlError
from pearl_core.fileio import atomic_write
from pearl_core.runtime.config import Setting

__all__ = ["USER_SCRIPT_MODULE", "env_script", "literal", "load_script_module", "render_program", "trainer_reference",
           "write_program"]

_MAX_DEPTH = 20
_PLAIN = "a plain literal: str, int, float (finite), bool, None, or lists/tuples/dicts of them with str keys"

# Set while load_script_module executes a user's script: composing from inside it would recurse.
_LOADING_SCRIPT: list[str] = []


# ----------------------------------------------------------------------------- literals
def literal(value: Any, where: str = "value") -> str:
    """Python source for ``value`` that ``ast.literal_eval`` turns back into an equal value.

    Raises:
        InvalidValueError: ``value`` (or something inside it) is not a plain
            literal; the message names where it was found.
    """
    return _emit(value, where, 0)


def _reject(value: Any, where: str, why: str) -> InvalidValueError:
    shown = repr(value) if type(value) in (str, int, float, bool, type(None)) else f"<{type(value).__name__}>"
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidValueError(f"RuntimeGen: {where} = {shown} {why}; expected {_PLAIN}. Fix: pass plain values "
                             "(e.g. a list of ints instead of a numpy array, a str instead of a Path).")


def _emit(value: Any, where: str, depth: int) -> str:
    if depth > _MAX_DEPTH:
        raise _reject(value, where, f"is nested deeper than {_MAX_DEPTH} levels (or contains itself)")
    t = type(value)
    if value is None or t is bool:
        return repr(value)
    if t is int:
        return int.__repr__(value)
    if t is float:
        if not math.isfinite(value):
            raise _reject(value, where, "is not finite")
        return float.__repr__(value)
    if t is str:
        return str.__repr__(value)
    if t is list:
        return "[" + ", ".join(_emit(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)) + "]"
    if t is tuple:
        items = [_emit(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if t is dict:
        parts = []
        for k, v in value.items():
            if type(k) is not str:
                raise _reject(k, f"a key of {where}", "is not a str")
            parts.append(f"{str.__repr__(k)}: {_emit(v, f'{where}[{k!r}]', depth + 1)}")
        return "{" + ", ".join(parts) + "}"
    raise _reject(value, where, f"is a {t.__module__}.{t.__qualname__}")


def _comment(value: Any) -> str:
    """Text safe inside a ``#`` comment: ASCII only, never a line break."""
    return ascii(value)


# ----------------------------------------------------------------------------- trainers
def trainer_reference(cls: type) -> tuple[str, str | None]:
    """``("module:qualname", script_path_or_None)`` naming ``cls`` for a generated program.

    A class defined in the running script (``__main__``) is named
    ``pearl_user_script:<qualname>`` and the script's absolute path is
    returned; the generated program loads that file (:func:`load_script_module`).

    Raises:
        InvalidValueError: the class is defined inside a function, or in
            ``__main__`` without a script file (REPL, notebook), or in a script
            whose top-level code composes/runs (it would run again on import).
    """
    module, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidValueError(f"RuntimeGen: trainer {cls!r} has no __module__/__qualname__; expected a class.")
    if "<locals>" in qualname:
        raise InvalidValueError(f"RuntimeGen: trainer class {qualname} is defined inside a function, so the "
                                "generated program cannot import it. Fix: define it at module level.")
    if module != "__main__" and module != USER_SCRIPT_MODULE:
        return f"{module}:{qualname}", None
    if module == USER_SCRIPT_MODULE:  # composing from a program that itself loaded the script
        main = sys.modules.get(USER_SCRIPT_MODULE)
    else:
        main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        raise InvalidValueError(
            f"RuntimeGen: trainer class {qualname} is defined in __main__ without a script file (an interactive "
            "session or a notebook), so the generated program cannot import it. Fix: move the class into a "
            "module (e.g. my_trainers.py next to your program) and import it from there.")
    path = os.path.abspath(path)
    check_script_guarded(path)
    return f"{USER_SCRIPT_MODULE}:{qualname}", path


@functools.lru_cache(maxsize=64)
def _registered_on_import(env_id: str) -> bool:
    """Whether a fresh Python process knows ``env_id`` once gymnasium is imported.

    Asked of a child interpreter (half a second or so). A yes holds for this interpreter and gymnasium
    version, so it is kept in the profile cache's directory (``registered-envs.json``) and a warm compose
    asks no child; a no is never kept (the user may move the registration into a module).
    """
    import gymnasium

    from pearl_core.composer.cachepath import cache_dir

    key = f"{sys.executable}|{gymnasium.__version__}|{env_id}"
    path = cache_dir().parent / "registered-envs.json"
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if known.get(key) is True:
        return True
    code = "import sys, gymnasium; sys.exit(0 if sys.argv[1] in gymnasium.registry else 3)"
    try:
        done = subprocess.run([sys.executable, "-c", code, env_id], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: assume it is (the program then says 'not registered' with the fix)
    if done.returncode != 0:
        return False
    try:
        atomic_write(path, json.dumps({**known, key: True}, indent=0, sort_keys=True), make_parents=True)
    except (OSError, PearlError):
        pass  # a cache that cannot be written costs the next compose the child again, nothing else
    return True


def env_script(env_id: str) -> str | None:
    """The composing script a generated program must load so that ``env_id`` is registered there, or ``None``.

    An id registered in this process but not in a fresh one (after ``import
    gymnasium``) was registered by the user's script, or by something it
    imports: the program loads the script (:func:`load_script_module`), which
    registers it again, in the program and in every spawned worker. Ids in
    gymnasium's ``module:Env-v0`` form, and ``ALE/``/``MinAtar/`` ids, register
    themselves anywhere and need no script.

    Raises:
        InvalidValueError: the id is registered only in an interactive session
            (no script file) or the script composes at top level; the fix names
            the ``module:Env-v0`` form.
    """
    from pearl_core.envs import default_wrappers

    if not isinstance(env_id, str) or ":" in env_id or default_wrappers(env_id):
        return None
    try:
        import gymnasium
    except ImportError:
        return None
    if env_id not in gymnasium.registry or _registered_on_import(env_id):
        return None
    main = sys.modules.get(USER_SCRIPT_MODULE) or sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        raise InvalidValueError(
            f"RuntimeGen: environment {env_id!r} was registered in this session (not by a module a new process "
            "imports), so the generated program could not create it. Fix: register it in a module (e.g. "
            f"my_envs.py calling gymnasium.register({env_id!r}, ...)) and name the env 'my_envs:{env_id}'.")
    path = os.path.abspath(path)
    check_script_guarded(path)
    return path


_COMPOSING_CALLS = ("Composer", "RuntimeGen", "run")


def check_script_guarded(path: str) -> None:
    """Reject a script whose top-level code (outside ``if __name__ == "__main__":``) composes or runs.

    The generated program imports such a script to reach the trainer class; its
    unguarded calls would run again there (and in every spawned worker).
    """
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidValueError(f"RuntimeGen: cannot read the script {path!r} that defines the trainer "
                                f"({type(exc).__name__}: {exc}).") from exc
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in _COMPOSING_CALLS:
                    raise InvalidValueError(
                        f"RuntimeGen: the trainer class is defined in the script {path!r}, which calls {name}(...) "
                        f"at top level (line {node.lineno}). The generated program imports that script to reach the "
                        "trainer, so this call would run again in it and in every worker. Fix: put the composer "
                        "calls under `if __name__ == \"__main__\":`, or move the trainer into its own module.")


def _is_main_guard(test: ast.expr) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def load_script_module(path: str, name: str = USER_SCRIPT_MODULE) -> Any:
    """Import the script at ``path`` as module ``name`` (once per process) and return it.

    Its ``if __name__ == "__main__":`` block does not run. Generated programs
    call this at top level so that the host and every spawned worker can import
    a trainer class that the user defined in their script.
    """
    if name in sys.modules:
        return sys.modules[name]
    if not os.path.isfile(path):
        raise PearlError(f"the script {path!r} that defines the trainer class was moved or deleted (it is not there "
                         "any more); the generated program loads the trainer from it. Fix: put the script back at "
                         "that path, or move the trainer into a module and run the composer again.")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PearlError(f"the script {path!r} cannot be loaded as a module; expected a .py file. "
                         "Fix: move the trainer into a module and run the composer again.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _LOADING_SCRIPT.append(path)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        _LOADING_SCRIPT.pop()
    return module


def script_load_error(path: str, exc: BaseException | None) -> PearlError | None:
    """What a generated program reports (``error: ...``, exit 2) when its top-level script load failed.

    ``exc`` is what :func:`load_script_module` raised at import time (``None``:
    it loaded). A :class:`PearlError` (the script was moved or deleted) is
    returned as it is; anything the script itself raised is wrapped with its
    type, message and the fix.
    """
    if exc is None or isinstance(exc, PearlError):
        return exc
    return PearlError(f"the script {path!r} that defines the trainer class failed while the generated program "
                      f"loaded it ({type(exc).__name__}: {exc}). Fix: run `python {path}` to see the traceback "
                      "and fix the script, or move the trainer into a module and run the composer again.")


def refuse_while_loading(what: str) -> None:
    """Raise if called while :func:`load_script_module` runs a user's script (it would recurse)."""
    if _LOADING_SCRIPT:
        raise PearlError(f"{what} was called while a generated program was importing {_LOADING_SCRIPT[-1]!r} to "
                         "reach the trainer class. Fix: put the composer calls of that script under "
                         "`if __name__ == \"__main__\":`.")


# ----------------------------------------------------------------------------- the program
_TEMPLATE = Template('''\
# Generated by PEARL ${version} (pearl_core.composer.RuntimeGen): a standalone training program.
# It is ordinary Python: read it, edit it, keep it with your results.
# Run:  python <this file> [--max-env-steps N] [--max-wall-time-s S] [--log-dir DIR] [--seed S] [--resume RUN]
#                          [--quiet] [--show-plan] [--ray ADDRESS [--ray-actors N] [--measure-links | --cluster SPEC]]
# --resume RUN continues the run in directory RUN from its checkpoint. A new run never writes into a
# directory holding an earlier run: it takes <dir>-2, <dir>-3, ... and says so.
# --ray ADDRESS runs the actors on a Ray cluster (pearl_core.runtime.rayrun.RayRuntime), placed on its
# nodes by the cluster model (pearl_core.composer.cluster); the replay and learner run on the node with
# the plan's devices for them (this process's node when it has them).
#
# Inputs
${inputs}
#
# Plan sha256 ${plan_hash}
${choice}
#
# The full plan (hardware, matrix, every candidate, the choice) is embedded at the end as
# PLAN_JSON; `--show-plan` prints it and checks it against PLAN_HASH. What running it does is
# pearl_core.runtime.main (pearl_core/runtime/program.py), so fixes there reach this program too.

from __future__ import annotations

import sys

from pearl_core.runtime.config import ReplayConfig, RunConfig, RuntimePlan, Setting, StopCriteria
from pearl_core.runtime.program import main, refuse_edited_values

refuse_edited_values()  # a value edited below that PEARL refuses: `error: ...` and the fix, not a traceback
${script_block}
PEARL_VERSION = ${version_lit}
PLAN_HASH = ${hash_lit}

# Backends that drive the chosen devices; main() imports each plugin and checks it can run here.
BACKENDS = ${backends_lit}

# What to train.
RUN_CONFIG = RunConfig(
${run_config}
)

# Where and how it runs: the composer's choice.
RUNTIME_PLAN = RuntimePlan(
${runtime_plan}
)

# The placement plan, as `PlacementPlan.to_json()` wrote it (sorted keys).
PLAN_JSON = (
${plan_json}
)


if __name__ == "__main__":  # actors are spawned processes: only the host runs main()
    sys.exit(main(RUN_CONFIG, RUNTIME_PLAN, PLAN_JSON, plan_hash=PLAN_HASH, pearl_version=PEARL_VERSION,
                  backends=BACKENDS, script_error=${script_error}))
''')

_SCRIPT_BLOCK = Template('''\
from pearl_core.composer.runtimegen import load_script_module, script_load_error

# The trainer class is defined in the script that composed this program. It is loaded from that
# file as module ${module_lit} (the script's `if __name__ == "__main__":` block does not run); this
# runs at import time so that spawned workers can import the trainer too. If it fails (the script
# was moved or deleted, or raised), main() reports it as `error: ...` before any worker starts.
USER_SCRIPT = ${path_lit}
try:
    load_script_module(USER_SCRIPT, ${module_lit})
    USER_SCRIPT_ERROR = None
except Exception as exc:  # noqa: BLE001 - reported by main(), not as a traceback at import
    USER_SCRIPT_ERROR = script_load_error(USER_SCRIPT, exc)
''')



def _fields_block(obj: Any, where: str, nested: dict[str, str] | None = None, indent: str = "    ") -> str:
    """``name=<literal>,`` lines (one per dataclass field of ``obj``; nested values as indented calls)."""
    lines = []
    for f in fields(obj):
        assert f.name.isidentifier()  # our own dataclasses' field names, never user input
        value = getattr(obj, f.name)
        if nested and f.name in nested:
            inner = _fields_block(value, f"{where}.{f.name}", None, indent + "    ")
            lines.append(f"{indent}{f.name}={nested[f.name]}(\n{inner}\n{indent}),")
            continue
        if f.name in ("trainer_kwargs", "env_kwargs"):
            value = dict(value)
        code = f"Setting.{value.name}" if isinstance(value, Setting) else literal(value, f"{where}.{f.name}")
        lines.append(f"{indent}{f.name}={code},")
    return "\n".join(lines)


def render_program(composition: Composition) -> str:
    """The generated program's source text (see the module docstring).

    Raises:
        InvalidValueError: ``composition`` is not a :class:`Composition`, or a
            value in it is not a plain literal (the message says which).
    """
    if not isinstance(composition, Composition):
        raise InvalidValueError(f"RuntimeGen: composition is a {type(composition).__name__}; expected a "
                                "Composition. Fix: pass what Composer.run() returned.")
    plan, config, runtime_plan = composition.plan, composition.config, composition.runtime_plan
    user_script = composition.user_script
    plan_hash = plan.content_hash()
    dec, ch, spec = plan.decision, plan.chosen, plan.spec
    kinds = {d["name"]: d["kind"] for d in spec["device"]}
    used = [kinds[plan.rm_device], kinds[plan.learner_device], kinds[plan.ds_device]]
    backends = tuple(dict.fromkeys(plan.backends.get(k, k) for k in used))
    devices = ", ".join(f"{d['name']} ({d['kind']})" for d in spec["device"])
    inputs = [
        f"#   environment   {_comment(config.env_id)}, {runtime_plan.n_actors} actor(s) x "
        f"{runtime_plan.envs_per_actor} env(s) stepped by the {runtime_plan.vector_backend!r} vector back end",
        f"#   trainer       {_comment(config.trainer)}",
        f"#   trainer args  {_comment(dict(config.trainer_kwargs))}",
        f"#   learner       batch {config.batch_size}, replay ratio {config.replay_ratio!r}, learning starts "
        f"{config.learning_starts}",
        f"#   replay        {_comment(config.replay.kind)}, capacity {config.replay.capacity}, fanout "
        f"{config.replay.fanout}" + (f", {config.replay.n_step}-step returns" if config.replay.n_step != 1 else ""),
        f"#   stop          {_comment({k: v for k, v in config.stop.to_dict().items() if v is not None})}",
        f"#   hardware      {_comment(spec.get('name') or '')}: {_comment(devices)}",
        f"#   metric        {_comment(dec.metric)}",
    ]
    if user_script:
        inputs.append(f"#   script        {_comment(user_script)}")
    choice = [
        f"#   RM on {_comment(plan.rm_device)}, learner on {_comment(plan.learner_device)}, Data Storage on "
        f"{_comment(plan.ds_device)}, {setting_label(plan.setting)}",
        f"#   predicted {ch.iteration_s * 1e6:,.1f} us per iteration, {ch.throughput:,.0f} samples/s, "
        f"{ch.power_w:,.1f} W; {len([c for c in dec.candidates if c.feasible])} feasible candidate(s)",
        f"#   backends {_comment(backends)}",
    ]
    plan_lines = plan.to_json(indent=1).splitlines(keepends=True)
    plan_json = "\n".join("    " + str.__repr__(line) for line in plan_lines)
    script_block = ""
    if user_script:
        script_block = "\n" + _SCRIPT_BLOCK.substitute(path_lit=literal(user_script, "user_script"),
                                                        module_lit=literal(USER_SCRIPT_MODULE))
    version = pearl_version()
    text = _TEMPLATE.substitute(
        version=_comment(version).strip("'"), inputs="\n".join(inputs), plan_hash=plan_hash,
        choice="\n".join(choice), script_block=script_block, version_lit=literal(version, "version"),
        hash_lit=literal(plan_hash), backends_lit=literal(backends, "backends"),
        run_config=_fields_block(config, "config", {"replay": "ReplayConfig", "stop": "StopCriteria"}),
        runtime_plan=_fields_block(runtime_plan, "runtime_plan"), plan_json=plan_json,
        script_error="USER_SCRIPT_ERROR" if user_script else "None")
    ast.parse(text)  # a bug here must never produce a file that does not parse
    return text


def write_program(composition: Composition, path: str | os.PathLike[str]) -> Path:
    """Render the program and write it to ``path`` atomically; returns the path."""
    return atomic_write(path, render_program(composition))
