#!/usr/bin/env bash
# Benchmark: CI as a fresh machine runs it. Clones this repository's HEAD (or REF) into a temporary
# folder, points the kit, vLLM and inductor caches at empty folders, runs .ci/run there and prints
# each phase's duration and the slowest tests of both passes. The full log stays in the folder.
#
#   scripts/bench_ci.sh [REF]
set -uo pipefail
ref=${1:-HEAD}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/optgate-bench-ci.XXXXXX")
git clone -q "$repo" "$work/clone"
git -C "$work/clone" checkout -q "$(git -C "$repo" rev-parse "$ref")"
export OPTGATE_KIT_DIR=$work/cache/kit VLLM_CACHE_ROOT=$work/cache/vllm TORCHINDUCTOR_CACHE_DIR=$work/cache/inductor
echo "bench_ci: $(git -C "$work/clone" log --oneline -1) in $work (log: $work/ci.log)"
begun=$SECONDS
(cd "$work/clone" && .ci/run) >"$work/ci.log" 2>&1
status=$?
echo "bench_ci: .ci/run exited $status after $((SECONDS - begun))s"
sed -n '/^==> CI phases/,$p' "$work/ci.log"
grep -E '^--- ' "$work/ci.log"
echo "slowest tests (both passes):"
grep -E '^[0-9]+\.[0-9]+s (call|setup|teardown) ' "$work/ci.log" | sort -rn | head -25
exit "$status"
