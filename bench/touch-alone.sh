#!/usr/bin/env bash
# Does one worker alone touch faster than a core does while every core is
# busy, and does `headroom load` see what a density ramp sees? The model
# gives every busy core the rate measured with a worker on every core (its
# touch-rate figure); the removed touch-alone-speedup term gave a lone
# worker more (docs/sim.md, Corrections). For ROUNDS rounds, each scan,
# interleaved: `headroom load` with one worker and with one a core
# (256 MiB each, RUN_SECONDS), then a density ramp (cgroup backend) of 1
# to cores+1 workers, all in RAM. Prints each round's pages/s a busy core
# and, at the end, the ratios: the ramp's lone worker against the load
# with every core busy (what the model predicts for it) and against the
# load alone; the ramp's every-core step against the load with every core
# busy. Needs root (density's node cgroup); makes a swap file and removes
# it; leaves nothing.
source "$(dirname "$0")/lib.sh"
rounds=${ROUNDS:-3}
run_seconds=${RUN_SECONDS:-8}
cpus=$(nproc)
per_core() { json_field "$("$HEADROOM" load --workers "$1" --size 256Mi --scan "$2" --duration "${run_seconds}s" --json | tail -n 1)" pages_per_sec | awk -v n="$1" '{ printf "%.0f", $1 / n }'; }
rows=$BENCH_TMP/rows
printf '%-6s %-7s %14s %14s %14s %14s\n' round scan "load alone" "load all busy" "ramp 1" "ramp $cpus /core"
for round in $(seq "$rounds"); do
  for scan in seq random; do
    alone=$(per_core 1 "$scan")
    busy=$(per_core "$cpus" "$scan")
    out=$BENCH_TMP/ramp
    rm -rf "$out"
    "$HEADROOM" density --node-memory $(((cpus + 2) * 320))Mi --swap 256Mi --vm-memory 320Mi --memory-size 256Mi --overcommit-percent 400 \
      --deployments "1:$((cpus + 1)):1" --workload-runtime "${run_seconds}s" --memory-scan "$scan" --out "$out" > "$BENCH_TMP/d.log" 2>&1 ||
      { tail -3 "$BENCH_TMP/d.log" >&2; exit 1; }
    # steps.csv: column 2 is the workers, 6 the aggregate pages/s.
    ramp1=$(awk -F, 'NR > 1 && $2 == 1 { printf "%.0f", $6 }' "$out/steps.csv")
    rampall=$(awk -F, -v n="$cpus" 'NR > 1 && $2 == n { printf "%.0f", $6 / n }' "$out/steps.csv")
    printf '%-6s %-7s %14s %14s %14s %14s\n' "$round" "$scan" "$alone" "$busy" "$ramp1" "$rampall"
    echo "$scan $alone $busy $ramp1 $rampall" >> "$rows"
  done
done
echo
echo "ratios (min-max over the rounds):"
for scan in seq random; do
  awk -v s="$scan" '$1 == s {
      r[1] = $4 / $3; r[2] = $4 / $2; r[3] = $5 / $3; r[4] = $2 / $3
      for (i = 1; i <= 4; i++) { if (n == 0 || r[i] < lo[i]) lo[i] = r[i]; if (n == 0 || r[i] > hi[i]) hi[i] = r[i] }
      n++
    }
    END {
      printf "%-7s ramp lone / load all busy %.2f-%.2f; ramp lone / load alone %.2f-%.2f; ramp all busy / load all busy %.2f-%.2f; load alone / load all busy %.2f-%.2f\n",
        s, lo[1], hi[1], lo[2], hi[2], lo[3], hi[3], lo[4], hi[4]
    }' "$rows"
done
