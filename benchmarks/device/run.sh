#!/usr/bin/env bash
# The device benchmark in one call on a GPU machine with no network (benchmarks/device/README.md):
#   1. the carried wheels (.whl/: gymnasium, stable-baselines3, sbx-rl and their needs, mujoco, ale-py)
#      into $PEARL_SITE (default /tmp/site) without resolving: what the image has stands in for the rest;
#   2. PEARL's plugins pearl-cpu (built here: scikit-build-core, pybind11, CMake from the image) and
#      pearl-cuda into the same folder; pearl_core itself runs from this checkout (PYTHONPATH);
#   3. bench.py, stopped when the call has run $PEARL_CALL_BUDGET_S (default 530 s, installs included; it
#      writes its tables after every round, so a stop keeps the rounds done), then table4.md/json and the
#      log copied to $OUT when set.
# Arguments go to bench.py (e.g. --dry-run --out /tmp/t4 for a smoke run of the same path).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
T0=$(date +%s)
PY=${PEARL_PYTHON:-python3}
SITE=${PEARL_SITE:-/tmp/site}
LOG=${OUT:-/tmp}/device_bench.log
say() { echo "[run.sh $(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
: > "$LOG"

PIP=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE")
"${PIP[@]}" .whl/*.whl || { say "the carried wheels did not install (is .whl/ carried?)"; exit 1; }
"${PIP[@]}" --no-build-isolation ./plugins/pearl_cpu ./plugins/pearl_cuda || { say "PEARL's plugins did not build"; exit 1; }
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
say "installed: $("$PY" -c 'import importlib.metadata as m; print(", ".join(d + " " + m.version(d) for d in (
  "gymnasium", "stable-baselines3", "sbx-rl", "mujoco", "ale-py", "pearl-cpu", "pearl-cuda", "torch", "jax")))')"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader 2>&1 | tee -a "$LOG"

left=$(( ${PEARL_CALL_BUDGET_S:-530} - ($(date +%s) - T0) ))
say "bench.py may run ${left} s"
timeout --kill-after=10 "$left" "$PY" benchmarks/device/bench.py "$@" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
say "bench.py exit status $rc"
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
  out=benchmarks/results/h200
  for ((i = 1; i <= $#; i++)); do [[ "${!i}" == --out ]] && { j=$((i + 1)); out=${!j}; }; done
  cp "$out"/table4.md "$out"/table4.json "$OUT"/ 2>/dev/null || say "no table4 in $out"
fi
exit "$rc"
