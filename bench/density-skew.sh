#!/usr/bin/env bash
# Harness overhead: 100 cgroup workers created and released together by
# `headroom density`; prints the measured start skew (target: under 10 ms)
# and creation-to-ready latency. Needs root; removes what it creates.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "density-skew.sh needs root" >&2; exit 2; }
workers=${WORKERS:-100}
"$HEADROOM" density --deployments "$workers" --vm-memory 64Mi --memory-size 16Mi --workload-runtime 3s \
  --out "$BENCH_TMP/run" --json > "$BENCH_TMP/run.json"
skew=$(grep -o '"start_skew_seconds": *[0-9.e-]*' "$BENCH_TMP/run.json" | head -n 1 | grep -o '[0-9.e-]*$')
p50=$(grep -o '"create_p50_seconds": *[0-9.e-]*' "$BENCH_TMP/run.json" | head -n 1 | grep -o '[0-9.e-]*$')
p99=$(grep -o '"create_p99_seconds": *[0-9.e-]*' "$BENCH_TMP/run.json" | head -n 1 | grep -o '[0-9.e-]*$')
printf '%d cgroup workers: start skew %.3f ms (target < 10 ms); creation-to-ready p50 %.3f s, p99 %.3f s\n' \
  "$workers" "$(awk -v s="$skew" 'BEGIN{print s*1000}')" "$p50" "$p99"
awk -v s="$skew" 'BEGIN{exit !(s >= 0.010)}' && exit 1 || exit 0
