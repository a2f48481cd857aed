#!/usr/bin/env bash
# A guest whose working set suddenly grows gets its memory back in < 5 s
# (issue 9's target), measured by TestSystemBalloonController: two 512 MiB
# micro-VMs ballooned to their floors, then one grows by 6 × 40 MiB, one
# a second. The test itself only holds the controller to 15 s, so a busy
# CI machine does not fail it; this runs it REPEATS times (default 3) on
# a machine left otherwise idle and prints each recovery against the
# target, and MOM's rules beside it from the same run. Needs root;
# restores swap and cgroups on exit.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "balloon-recovery.sh needs root" >&2; exit 2; }
repeats=${REPEATS:-3}
target=5
met=0
printf '%-4s %12s %14s %10s %12s\n' run reclaimed recovery_s vs_target mom_recovery
for ((i = 1; i <= repeats; i++)); do
  out=$(CGO_ENABLED=0 go test -tags system -count 1 -v -run '^TestSystemBalloonController$' ./internal/agent 2>&1) || true
  line=$(grep -E '^balloon: headroom reclaimed' <<<"$out" || true)
  if [ -z "$line" ]; then
    grep -E -- '--- FAIL|want' <<<"$out" >&2 || true
    echo "run $i: the test printed no result" >&2
    exit 1
  fi
  reclaimed=$(sed -E 's/^balloon: headroom reclaimed ([0-9]+) MiB.*/\1/' <<<"$line")
  recovery=$(sed -E 's/^balloon: headroom [^,]*, recovery ([-0-9.]+) s.*/\1/' <<<"$line")
  mom=$(sed -E 's/.*mom reclaimed [0-9]+ MiB, recovery ([-0-9.]+) s.*/\1/' <<<"$line")
  ratio=$(awk -v r="$recovery" -v t="$target" 'BEGIN{ if (r < 0) print "never"; else printf "%.2f", r / t }')
  awk -v r="$recovery" -v t="$target" 'BEGIN{ exit !(r >= 0 && r < t) }' && met=$((met + 1))
  printf '%-4s %8s MiB %14s %10s %12s\n' "$i" "$reclaimed" "$recovery" "$ratio" "$mom"
done
echo "target < ${target} s: met in $met of $repeats runs"
