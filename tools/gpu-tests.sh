#!/usr/bin/env bash
# Run every layer's tests on a GPU machine without installing anything (no nox there): the
# packages go on PYTHONPATH (iris and iris.mem are namespaces, so the src folders merge).
# Usage: tools/gpu-tests.sh [pytest args...]   e.g. tools/gpu-tests.sh -x -q
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$(ls -d packages/*/src | paste -sd:)${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
status=0
for tests in packages/*/tests; do
  echo "=== $tests"
  python3 -m pytest "$tests" "$@" || status=1
done
exit $status
