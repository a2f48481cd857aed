#!/usr/bin/env bash
# `headroom load --rate` accuracy: achieved/requested over 10 s for 1k to 1M
# pages/s (target: within 2%).
source "$(dirname "$0")/lib.sh"
seconds=${SECONDS_PER_RUN:-10}
status=0
printf '%10s %14s %8s\n' requested achieved ratio
for rate in 1000 10000 100000 1000000; do
  line=$("$HEADROOM" load --size 256Mi --rate "$rate" --duration "${seconds}s" --json | tail -n 1)
  got=$(json_field "$line" pages_per_sec)
  ratio=$(awk -v g="$got" -v r="$rate" 'BEGIN{printf "%.4f", g/r}')
  printf '%10d %14.1f %8s\n' "$rate" "$got" "$ratio"
  awk -v x="$ratio" 'BEGIN{exit !(x < 0.98 || x > 1.02)}' && status=1
done
exit $status
