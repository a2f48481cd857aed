#!/usr/bin/env bash
# A new day's evidence for the simulator's fitted terms (docs/sim.md,
# "Corrections"): measures the four fidelity cases (seq and random, 1 and
# 2 GiB nodes, each ramp twice) with the model that still had every term
# (faee645, whose probe measures each of them), makes them cases beside
# the other days' in OUT (default bench/results/sim-fidelity), and holds
# every term against all days' cases: its last lines are each term's
# verdict by docs/sim.md's rule. The run's log is OUT/DAY-run.txt and the
# comparison OUT/DAY-corrections-faee645.txt. Needs root; about an hour.
# A day is measured once: it stops if OUT already holds that day's cases
# (a run that failed left only its log, and may be run again).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "sim-new-day.sh needs root" >&2; exit 2; }
OUT=${OUT:-bench/results/sim-fidelity}
# The model that had every fitted term, and each term with the value
# that turns it off (an empty value: the term's own "none").
REF=faee645
TERMS=(touch-turn-blocks=1 swap-mixed-capacity=1 swap-mixed-capacity-half-full= swap-write-pages-half-full=
  touch-alone-speedup=0 touch-beside-paging=0 paging-steal=0 readahead-used=1 readahead-order=0 reclaim-order=0
  reclaim-order-steady=0 reclaim-burst=0 fill-out=0)
day=$(date +%F)
if compgen -G "$OUT/$day-*/" > /dev/null; then
  echo "$OUT already holds $day's cases: measure another day, or give another OUT" >&2
  exit 2
fi

git worktree add -q --detach "$BENCH_TMP/ref" "$REF"
cleanup_hooks+=("git worktree remove --force '$BENCH_TMP/ref'")
echo "measuring $day's ramps with $REF's bench/sim-fidelity.sh (about an hour)" >&2
{
  echo "# $day, $(date -u +%H:%M)- UTC, on $REF: SCANS=\"random seq\" REPEATS=2 RESULTS=DIR bash bench/sim-fidelity.sh (by bench/sim-new-day.sh)"
  SCANS="random seq" REPEATS=2 RESULTS="$BENCH_TMP/results" bash "$BENCH_TMP/ref/bench/sim-fidelity.sh"
} 2>&1 | tee "$OUT/$day-run.txt"
bench/sim-corrections.sh --cases-from "$BENCH_TMP/results" "$OUT"
{
  echo "# $day on $REF (REF): REF=$REF ADD=1 CORRECTIONS=\"${TERMS[*]}\" bench/sim-corrections.sh $OUT/20??-*-*/"
  REF=$REF ADD=1 CORRECTIONS="${TERMS[*]}" bench/sim-corrections.sh "$OUT"/20??-*-*/
} | tee "$OUT/$day-corrections-$REF.txt"
