#!/usr/bin/env bash
# Runs the selected cases of llama.cpp's tools/server/tests (test_tool_call.py,
# test_compat_oai_responses.py, test_compat_anthropic.py) against `plookup serve` and against
# the real llama-server, through llama-server-shim.  See README.md.
#
#   benchmarks/llama_cpp_tests/run.sh [plookup] [llama-server]     (default: both)
#
# Environment: RESULTS (default /tmp/llama-cpp-server-tests-results), WORK (the copy of the
# tests, default /tmp/llama-cpp-server-tests), VENDOR (llama.cpp's source tree), PORT (18480),
# SELECTION (default selection.txt here), RUN_TIMEOUT (seconds per pytest run, default 3600)
# LLAMA_CPP_TESTS_INNER and NO_COPY are internal: run.sh re-runs itself under flock..
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=${PY:-$REPO/.venv/bin/python}
VENDOR=${VENDOR:-/root/.cache/plookup/llama-build/0.3.36/src/vendor/llama.cpp}
WORK=${WORK:-/tmp/llama-cpp-server-tests}
RESULTS=${RESULTS:-/tmp/llama-cpp-server-tests-results}
SELECTION=${SELECTION:-$HERE/selection.txt}
RUN_TIMEOUT=${RUN_TIMEOUT:-3600}
LOCK=${LOCK:-/tmp/plookup-cpu.lock}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(plookup llama-server)

# a fresh copy of the tests (the vendored tree is never edited); ../../../models/templates
# must resolve from the tests directory, so the copy keeps llama.cpp's layout.
if [ -z "${NO_COPY:-}" ]; then
  rm -rf "$WORK"
  mkdir -p "$WORK/tools/server" "$RESULTS"
  cp -r "$VENDOR/tools/server/tests" "$WORK/tools/server/tests"
  ln -s "$VENDOR/models" "$WORK/models"
fi
cd "$WORK/tools/server/tests" || exit 1

export PYTHONPATH="$HERE" LLAMA_SERVER_BIN_PATH="$HERE/llama-server-shim" SHIM_SELECTION="$SELECTION"
export PORT=${PORT:-18480} SHIM_RELAX_STORIES=${SHIM_RELAX_STORIES:-1}
export SHIM_START_TIMEOUT=${SHIM_START_TIMEOUT:-600} SHIM_REQUEST_TIMEOUT=${SHIM_REQUEST_TIMEOUT:-600}
export SLOW_TESTS=1

run_target() {  # the three files against one server, under the machine's CPU lock (run.sh takes it)
  local target=$1
  export SHIM_TARGET=$target SHIM_LOG="$RESULTS/$target-command-lines.log"
  : > "$SHIM_LOG"
  {  # what was tested: plookup runs from the working tree, which may hold uncommitted edits
    echo "target=$target date=$(date -u +%FT%TZ) head=$(git -C "$REPO" rev-parse --short HEAD)"
    echo "uncommitted under plookup/: $(git -C "$REPO" status --short -- plookup | tr '\n' ' ')"
    echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
  } > "$RESULTS/$target-meta.txt"
  for f in test_tool_call test_compat_oai_responses test_compat_anthropic; do
    echo "== $target $f $(date -u +%FT%TZ)"
    timeout "$RUN_TIMEOUT" "$PY" -m pytest -p shim_plugin -p no:cacheprovider \
      -rfEs --tb=short -o junit_logging=all -o junit_log_passing_tests=false \
      --junitxml="$RESULTS/$target-$f.xml" "unit/$f.py" > "$RESULTS/$target-$f.log" 2>&1
    echo "   rc=$? $(tail -1 "$RESULTS/$target-$f.log")"
  done
}

if [ -n "${LLAMA_CPP_TESTS_INNER:-}" ]; then
  run_target "$LLAMA_CPP_TESTS_INNER"
  exit
fi
for target in "${TARGETS[@]}"; do
  # one model server at a time (pytest starts one per case), -t 2, under the lock
  LLAMA_CPP_TESTS_INNER=$target NO_COPY=1 flock "$LOCK" "$HERE/run.sh"
done
