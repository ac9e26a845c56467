#!/usr/bin/env bash
# pearl-cuda GPU check: one command on a machine with an NVIDIA GPU and no internet.
#
#   bash plugins/pearl_cuda/scripts/gpu_check.sh          (from anywhere; works on a copy of the repo)
#
# Steps (each with its own timeout; a failing step is recorded and the next one runs):
#   1. env      pick a Python whose torch sees the GPU (PEARL_PYTHON, ./.venv, python3, python), or
#               install torch==2.13.0 from the local wheels/cache; install pearl-core, pearl-cpu and
#               pearl-cuda[cuda12|cuda13] (cupy matching the driver's CUDA major) only if they do not
#               import already. Offline: pip uses its configured index/cache; PEARL_WHEELS=DIR adds
#               `--no-index --find-links DIR`.
#   2. tests    pytest plugins/pearl_cuda: nvcc compile checks, host logic, and the GPU tests
#               (conformance kit on every update strategy, bit-for-bit vs the numpy emulation,
#               device face with cupy and torch, setting-2 replay, GPU Data Storage, measure_primitive, detection).
#   3. composed composer plans run end to end (scripts/composed_plan_check.py): Composer(hardware=None),
#               placements forced with composer.run(place=...), RuntimeGen, the generated program run for
#               3000 env steps; (a) setting 2 with RM, Data Storage and learner on the GPU, (b) setting 1
#               with RM and Data Storage on the CPU and the learner on the GPU: env steps/s and predicted vs
#               measured iteration time, as a Markdown table in the results file.
#   4. replay   sum tree at capacity 2^20, batches 32..4096, device arrays in/out, vs the CPU backend.
#   5. learner  MLP 256-256 step, batch 64..4096: stream search, CUDA graph, DQN on GPU/CPU, setting 2.
#   6. e2e      short DQN CartPole-v1 run, learner and sum tree on the GPU (serial runtime).
#   7. model    predicted (analytic gpu_row learner model, eager and CUDA graph) vs measured DQN learner
#               step, batch 32/128/512, MLP 64-64 and 256-256 (scripts/gpu_learner_model.py); the table also
#               goes to plugins/pearl_cuda/results/gpu_learner_model.md.
#   8. iteration the learner iteration on the GPU (scripts/iteration_bench.py): sample + gather + update +
#               priority write-back on 2^20 leaves through LearnerStep's device path, for DQN MLP b64, SAC b256
#               and DQN Nature-CNN b32; median us and host syncs per iteration; a serial DQN CartPole run with
#               learner, tree and storage on the GPU. Writes benchmarks/results/h200/iteration.json.
# Results: benchmarks/results/cuda_gpu_check.md (and a copy plus the logs under $OUT when set).
# The whole check stops itself before 9 minutes (PEARL_GPU_CHECK_BUDGET_S, default 540 s; a step that
# would start with under 15 s left is skipped and marked SKIPPED). PEARL_GPU_CHECK_STEPS="model tests ..."
# runs those steps after env, in that order (default: all, in the order above): the ones that matter most
# first when device time is short.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$REPO"
START=$(date +%s)
BUDGET=${PEARL_GPU_CHECK_BUDGET_S:-540}
DEADLINE=$((START + BUDGET))
RESULTS="benchmarks/results/cuda_gpu_check.md"
LOGDIR="$(mktemp -d /tmp/pearl-gpu-check.XXXXXX)"
BENCH="plugins/pearl_cuda/scripts/bench_gpu.py"
mkdir -p "$(dirname "$RESULTS")"
: > "$RESULTS"
declare -a STEP_ROWS=()
PY=""

log() { printf '[gpu_check %3ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }

# run_step NAME MAX_SECONDS CMD...: run CMD under a timeout that also respects the global deadline.
# Exit codes: 0 PASS, 3 NO-GPU (the bench's "no GPU here"), 124/137 TIMEOUT, else FAIL.
run_step() {
  local name=$1 max=$2; shift 2
  local left=$((DEADLINE - $(date +%s) - 5))
  local t=$(( max < left ? max : left ))
  if (( t < 15 )); then
    STEP_ROWS+=("| $name | SKIPPED | 0 | no time left in the ${BUDGET}s budget |")
    log "$name: skipped (no time left)"
    return 0
  fi
  log "$name: start (timeout ${t}s)"
  local t0 rc status
  t0=$(date +%s)
  set +e
  timeout --kill-after=10 "$t" "$@" > "$LOGDIR/$name.log" 2>&1
  rc=$?
  set -e
  case $rc in
    0) status=PASS ;;
    3) status=NO-GPU ;;
    124|137) status=TIMEOUT ;;
    *) status="FAIL (rc $rc)" ;;
  esac
  local last
  last=$(grep -v '^\s*$' "$LOGDIR/$name.log" | tail -n 1 | cut -c1-160 | tr '|' '/' || true)
  STEP_ROWS+=("| $name | $status | $(( $(date +%s) - t0 )) | ${last} |")
  log "$name: $status"
  if [[ $status != PASS ]]; then tail -n 15 "$LOGDIR/$name.log" | sed 's/^/    /' || true; fi
  return 0
}

# py_check CODE [ARGS...]: run a Python snippet from / so that the checkout's own pearl_core/ folder does not
# pass for an installed package.
py_check() { (cd / && "$PY" -c "$@"); }

has_cuda_torch() { timeout 90 "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; }
has_torch() { timeout 90 "$1" -c 'import torch' >/dev/null 2>&1; }

pip_install() {  # pip_install ARGS...: the configured index/cache first, then local wheels if given
  local opts=(--quiet --disable-pip-version-check --retries 0 --timeout 10)
  if [[ -n "${PEARL_WHEELS:-}" ]]; then  # local wheels first: never wait on a network that is not there
    "$PY" -m pip install "${opts[@]}" --no-index --find-links "$PEARL_WHEELS" "$@" && return 0
  fi
  "$PY" -m pip install "${opts[@]}" "$@" && return 0
  if [[ -n "${PEARL_WHEELS:-}" ]]; then  # offline, and the resolver refuses what the image has installed (a
    # pin among its own packages that no index can settle here): install without resolving; what is already
    # there stands in for the dependencies, the later checks say what is missing
    echo "pip could not resolve offline: installing $* without dependencies"
    "$PY" -m pip install "${opts[@]}" --no-index --find-links "$PEARL_WHEELS" --no-deps --no-build-isolation "$@" \
      && return 0
  fi
  return 1
}

cuda_major() {  # the CUDA major that cupy must match: torch's build, else the driver's
  local m
  m=$("$PY" -c 'import torch; print((torch.version.cuda or "").split(".")[0])' 2>/dev/null || true)
  if [[ -z "$m" ]] && command -v nvidia-smi >/dev/null; then
    m=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n 1)
  fi
  [[ "$m" == 12 || "$m" == 13 ]] && echo "$m" || echo 12
}

step_env() {
  set -x
  nvidia-smi || echo "nvidia-smi not found"
  local base="" cand
  for cand in ${PEARL_PYTHON:-} "$REPO/.venv/bin/python" python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && has_cuda_torch "$cand"; then base=$cand; break; fi
  done
  if [[ -z "$base" ]]; then
    for cand in ${PEARL_PYTHON:-} "$REPO/.venv/bin/python" python3 python; do
      command -v "$cand" >/dev/null 2>&1 && { base=$cand; break; }
    done
  fi
  # A venv is used as it is; a system Python gets .venv-gpu that still sees its (CUDA) torch.
  if "$base" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)'; then
    PY=$base
  else
    [[ -x "$REPO/.venv-gpu/bin/python" ]] || "$base" -m venv --system-site-packages "$REPO/.venv-gpu"
    PY="$REPO/.venv-gpu/bin/python"
  fi
  echo "$PY" > "$LOGDIR/python"
  has_torch "$PY" || pip_install torch==2.13.0 || echo "torch could not be installed"
  # Never let a dependency resolution replace the torch that is there (a CUDA build on a GPU machine).
  local tv
  tv=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
  if [[ -n "$tv" ]]; then echo "torch==$tv" > "$LOGDIR/constraints.txt"; export PIP_CONSTRAINT="$LOGDIR/constraints.txt"; fi
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA build", torch.version.cuda, "cuda available", torch.cuda.is_available())' || true
  if ! py_check 'import pearl_core, gymnasium, hypothesis, pytest' 2>/dev/null; then
    pip_install -e ".[rl,test]" || pip_install --no-build-isolation -e ".[rl,test]"
  fi
  py_check 'import gymnasium' 2>/dev/null || pip_install gymnasium farama-notifications || echo "gymnasium missing"
  if ! py_check 'from pearl_cpu import _sumtree' 2>/dev/null; then
    pip_install ./plugins/pearl_cpu || pip_install --no-build-isolation ./plugins/pearl_cpu \
      || echo "pearl-cpu could not be built: the CPU comparison will be missing"
  fi
  local major
  major=$(cuda_major)
  if ! py_check 'import cupy, pearl_cuda, sys; sys.exit(0 if pearl_cuda.__file__.startswith(sys.argv[1]) else 1)' "$REPO" 2>/dev/null; then
    pip_install -e "./plugins/pearl_cuda[cuda${major}]" \
      || { pip_install --no-deps -e ./plugins/pearl_cuda && pip_install "cupy-cuda${major}x"; }
  fi
  "$PY" -c 'import pynvml' 2>/dev/null || pip_install "nvidia-ml-py" || echo "nvidia-ml-py missing: power comes from the spec"
  "$PY" -m pearl_core.cli plugins || true
  # The step passes only if everything the later steps need imports and sees a device.
  py_check 'import cupy, torch, pearl_core, pearl_cuda, gymnasium; print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount(), "| torch cuda", torch.cuda.is_available())'
}

run_step env 200 bash -c "$(declare -f py_check has_cuda_torch has_torch pip_install cuda_major step_env); REPO='$REPO' LOGDIR='$LOGDIR' PY=''; step_env"
PY=$(cat "$LOGDIR/python" 2>/dev/null || command -v python3)
log "python: $PY"

"$PY" "$BENCH" header --out "$RESULTS" > /dev/null 2>&1 || {
  { echo "# pearl-cuda GPU check"; echo; echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "- pearl_cuda did not import (see the env step)"; } >> "$RESULTS"; }
{
  echo "- torch: $("$PY" -c 'import torch; print(torch.__version__, "| CUDA build", torch.version.cuda, "| torch.cuda.is_available():", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  echo "- driver: $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader 2>/dev/null | head -n 1 || echo unknown)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >> "$RESULTS"

export PEARL_CONFORMANCE_EXAMPLES=${PEARL_CONFORMANCE_EXAMPLES:-60}
ALL_STEPS="iteration tests composed replay learner e2e model"
for step in ${PEARL_GPU_CHECK_STEPS:-$ALL_STEPS}; do
  case $step in
    tests) run_step tests 170 "$PY" -m pytest -q -ra -p no:cacheprovider plugins/pearl_cuda ;;
    composed) run_step composed 200 "$PY" plugins/pearl_cuda/scripts/composed_plan_check.py --out "$RESULTS" \
      --max-env-steps 3000 --run-timeout-s 80 --work-dir "$LOGDIR/composed" ;;
    replay) run_step replay 80 "$PY" "$BENCH" replay --out "$RESULTS" --calls 200 --reps 5 ;;
    learner) run_step learner 75 "$PY" "$BENCH" learner --out "$RESULTS" --iters 50 ;;
    e2e) run_step e2e 100 "$PY" "$BENCH" e2e --out "$RESULTS" --max-env-steps 30000 ;;
    iteration) run_step iteration 150 "$PY" plugins/pearl_cuda/scripts/iteration_bench.py --out "$RESULTS" \
      --json benchmarks/results/h200/iteration.json --iters 200 --e2e-env-steps 30000 ;;
    model) run_step model 90 "$PY" plugins/pearl_cuda/scripts/gpu_learner_model.py --out "$RESULTS" \
      --updates 200 --warmup 30 ;;
    *) STEP_ROWS+=("| $step | FAIL (unknown step) | 0 | PEARL_GPU_CHECK_STEPS names steps of: $ALL_STEPS |")
       log "$step: unknown step (expected one of: $ALL_STEPS)" ;;
  esac
done

{
  echo
  echo "## Tests (pytest plugins/pearl_cuda, PEARL_CONFORMANCE_EXAMPLES=$PEARL_CONFORMANCE_EXAMPLES)"
  echo
  echo '```'
  grep -E '^(FAILED|ERROR|SKIPPED)|passed|failed|error' "$LOGDIR/tests.log" 2>/dev/null | tail -n 40 || echo "no test log"
  echo '```'
  echo
  echo "## Steps"
  echo
  echo "| step | status | seconds | last line |"
  echo "|---|---|---:|---|"
  printf '%s\n' "${STEP_ROWS[@]}"
  echo
  echo "Total: $(( $(date +%s) - START )) s of the ${BUDGET} s budget. Logs: $LOGDIR"
  for f in "$LOGDIR"/*.log; do
    if grep -q "$(basename "$f" .log) | \(FAIL\|TIMEOUT\)" <(printf '%s\n' "${STEP_ROWS[@]}"); then
      echo; echo "### tail of $(basename "$f")"; echo; echo '```'; tail -n 30 "$f"; echo '```'
    fi
  done
} >> "$RESULTS"

if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
  cp "$RESULTS" "$OUT/" && cp "$LOGDIR"/*.log "$OUT/" 2>/dev/null || true
  cp plugins/pearl_cuda/results/gpu_learner_model.md "$OUT/" 2>/dev/null || true
  cp benchmarks/results/h200/iteration.json "$OUT/" 2>/dev/null || true
  for f in "$LOGDIR"/composed/run_*.log; do [[ -f "$f" ]] && cp "$f" "$OUT/composed_$(basename "$f")"; done || true
fi
log "done: $RESULTS"
printf '%s\n' "${STEP_ROWS[@]}"
