#!/usr/bin/env bash
# Run layers' tests on a GPU machine without installing anything (no nox there): the packages go on
# PYTHONPATH (iris and iris.mem are namespaces, so the src folders merge).
#
#   tools/gpu-tests.sh [pytest args...]
#       every layer's tests, one pytest after another
#   JOBS=4 [TIMEOUT=500] [LOGS=DIR] [MPS=1] tools/gpu-tests.sh TESTS... [-- pytest args...]
#       each TESTS folder (e.g. packages/iris-ccl/tests) dealt over JOBS parallel pytest processes by
#       tools/parallel-tests.py (its logs, not-run.txt and failed.txt in DIR/<layer>, default
#       parallel-tests-logs), one folder after another; MPS=1 starts NVIDIA's MPS daemon first
#       when none runs (as root), so that the ranks sharing the GPU run side by side, and stops it
#       at the end if it started it. The jobs are dealt by tools/gpu-test-times/<layer>.txt (seconds
#       per test of an earlier run; without it, in turns); each run writes its own times into
#       DIR/<layer>/times.txt, to replace that file with.
#   IRIS_TEST_MAX_RANKS=4 JOBS=8 ... tools/gpu-tests.sh TESTS...
#       each job keeps at most 4 rank processes alive (iris.testing.world.WorldPool) and runs its
#       tests in world-size order, so twice the jobs fit under MPS's 48 clients a GPU (a job's
#       session otherwise keeps 1 + 2 + 3 + 4 ranks): twice the compiles at once on a cold cache.
# Either way each kernel specialization is compiled by one process while the others that need it
# wait for the cache (iris.testing.compile_once; a TRITON_CACHE_MANAGER already set is kept): the
# ranks of a test no longer compile the same kernel side by side.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$(ls -d "$PWD"/packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
export TRITON_CACHE_MANAGER="${TRITON_CACHE_MANAGER:-iris.testing.compile_once:CompileOnce}"
status=0
if [ -z "${JOBS:-}" ]; then
  for tests in packages/*/tests; do
    echo "=== $tests"
    python3 -m pytest "$tests" "$@" || status=1
  done
  exit $status
fi

folders=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do folders+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#folders[@]} -gt 0 ] || { echo "JOBS=N: name the test folders, e.g. packages/iris-ccl/tests" >&2; exit 2; }
started_mps=0
if [ "${MPS:-0}" = 1 ] && ! pgrep -f nvidia-cuda-mps-control > /dev/null; then
  nvidia-cuda-mps-control -d && started_mps=1
fi
for tests in "${folders[@]}"; do
  layer="$(basename "$(dirname "$tests")")"
  echo "=== $tests ($JOBS jobs)"
  start=$(date +%s)
  times="tools/gpu-test-times/$layer.txt"  # an earlier run's seconds per test: the jobs are dealt by them
  python3 tools/parallel-tests.py --jobs "$JOBS" ${TIMEOUT:+--timeout "$TIMEOUT"} --times "$times" \
    --logs "${LOGS:-parallel-tests-logs}/$layer" -- "$tests" "$@" || status=1
  echo "=== $tests: $(( $(date +%s) - start )) s"
done
[ $started_mps = 1 ] && echo quit | nvidia-cuda-mps-control
exit $status
