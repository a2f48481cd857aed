#!/usr/bin/env bash
# Compares `headroom load`'s resident touch rate with the plain C loop in
# touchref.c doing the same work (256 MiB, writes=1, one core), for seq and
# random scans, and prints both rates and the ratio (target: >= 0.95).
# Each configuration alternates C and headroom runs and keeps each one's best.
source "$(dirname "$0")/lib.sh"
out=$BENCH_TMP
gcc -O2 -o "$out/touchref" bench/touchref.c
seconds=${SECONDS_PER_RUN:-3}
runs=${RUNS:-3}
cpu=${CPU:-1}
status=0
printf '%-7s %14s %14s %7s\n' scan c_pages/s go_pages/s ratio
for scan in seq random; do
  best_c=0 best_go=0
  for _ in $(seq "$runs"); do
    c=$(taskset -c "$cpu" "$out/touchref" 256 "$scan" "$seconds")
    line=$(taskset -c "$cpu" "$HEADROOM" load --size 256Mi --scan "$scan" --writes 1 --duration "${seconds}s" --json | tail -n 1)
    go=$(json_field "$line" pages_per_sec)
    best_c=$(awk -v a="$best_c" -v b="$c" 'BEGIN{print (b>a)?b:a}')
    best_go=$(awk -v a="$best_go" -v b="$go" 'BEGIN{print (b>a)?b:a}')
  done
  ratio=$(awk -v g="$best_go" -v c="$best_c" 'BEGIN{printf "%.3f", g/c}')
  printf '%-7s %14.0f %14.0f %7s\n' "$scan" "$best_c" "$best_go" "$ratio"
  awk -v r="$ratio" 'BEGIN{exit !(r < 0.95)}' && status=1
done
exit $status
