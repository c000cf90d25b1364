#!/usr/bin/env bash
# The real-GPU tier in one command, for a lent GPU machine:
#
#   tests/gpu/run.sh OUTDIR
#
# builds the C libraries (make -C c), runs `pytest tests/gpu` under a time limit
# (GPU_TIER_TIMEOUT seconds, default 480; SIGINT first so pytest still writes its report), and
# writes to OUTDIR: summary.json (each test's outcome, seconds, message and the figures it
# recorded with record_property), junit.xml, pytest.log and build.log. Needs only what the GPU
# machine has (python3 with pytest; PyTorch, cuda-bindings, nvidia-ml-py for the tests).
# Exit status: pytest's (124 when the time limit cut it short), 2 when the build failed.
set -u
out=${1:?usage: tests/gpu/run.sh OUTDIR}
limit=${GPU_TIER_TIMEOUT:-480}
python=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 2
if ! make -C c > "$out/build.log" 2>&1; then
    echo "build failed: see $out/build.log" >&2
    "$python" tests/gpu/summarize.py "$out/junit.xml" 2 "$out/build.log" > "$out/summary.json"
    exit 2
fi
timeout -s INT -k 30 "$limit" "$python" -m pytest tests/gpu -v -p no:cacheprovider \
    -o junit_family=xunit1 --junitxml="$out/junit.xml" > "$out/pytest.log" 2>&1
rc=$?
"$python" tests/gpu/summarize.py "$out/junit.xml" "$rc" "$out/pytest.log" > "$out/summary.json"
echo "tests/gpu: exit status $rc; summary in $out/summary.json" >&2
exit $rc
