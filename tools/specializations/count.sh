#!/usr/bin/env bash
# Count the kernel specializations a test selection launches on CPU ranks (see sitecustomize.py).
# Usage: tools/specializations/count.sh DIR [pytest arguments...]; then summary.py DIR.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="$1"; shift
rm -rf "$dir"; mkdir -p "$dir"
export IRIS_SPEC_LOG="$(cd "$dir" && pwd)" TRITON_INTERPRET=1
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pytest "$@"
status=$?
python3 "$here/summary.py" "$dir"
exit $status
