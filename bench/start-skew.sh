#!/usr/bin/env bash
# Start skew of `headroom load --workers 50` (how far apart the workers'
# first touches are) over several runs (target: under 10 ms).
source "$(dirname "$0")/lib.sh"
workers=${WORKERS:-50}
runs=${RUNS:-5}
worst=0
for i in $(seq "$runs"); do
  line=$("$HEADROOM" load --workers "$workers" --size 4Mi --duration 1s --json | tail -n 1)
  skew=$(json_field "$line" start_skew_seconds)
  printf 'run %d: %d workers, start skew %.3f ms\n' "$i" "$workers" "$(awk -v s="$skew" 'BEGIN{print s*1000}')"
  worst=$(awk -v a="$worst" -v b="$skew" 'BEGIN{print (b>a)?b:a}')
done
printf 'worst: %.3f ms (target < 10 ms)\n' "$(awk -v s="$worst" 'BEGIN{print s*1000}')"
awk -v s="$worst" 'BEGIN{exit !(s >= 0.010)}' && exit 1 || exit 0
