#!/usr/bin/env bash
# The simulator against this machine: the same density ramp measured
# (headroom density, cgroup backend) and simulated (headroom sim --machine
# this, no other calibration), for seq and random access on two node
# sizes. Prints per step the measured and simulated aggregate pages/s and
# their ratio, and per ramp both knees. Targets: within 15% per step in RAM
# and on the plateau, the knee within one worker. Needs root (density);
# removes all it made. RESULTS=dir keeps both runs per case (for
# `headroom report`, measured solid and simulated dashed). SCANS picks the
# scans (default "seq random"); TIER=zram:SIZE puts a compressed tier in
# front of the swap file in both (TIER=zswap:max_pool_percent=N with
# SIM_TIER=zram:SIZE,pool=host, the model's stand-in), and
# CONTENT=compress=2 (say) gives the workers' pages content it can
# compress. REPEATS=N measures each ramp N times: the table then shows
# the measured median, min and max per step and the ratio to the median,
# and a step counts as matched when the simulated rate is within 15% of
# some measured run (this shared VM's rates move 15-25% between runs);
# the model's figures are measured after the middle run.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "sim-fidelity.sh needs root" >&2; exit 2; }
OUT=${RESULTS:-$BENCH_TMP/results}
mkdir -p "$OUT"
RUNTIME=${RUNTIME:-8s}
# node, swap file, deployments
CASES=${CASES:-"1Gi,3Gi,1:10:1 2Gi,6Gi,1:16:1"}

extra=() sim_extra=() content=()
# density's node is a memory cgroup on this larger host: zram's pool is
# charged to no cgroup, so the model keeps it outside the node's RAM.
# SIM_TIER gives the model's tier where density's is not zram:SIZE (zswap).
[ -n "${TIER:-}" ] && extra+=(--swap-tier "$TIER") && sim_extra+=(--swap-tier "${SIM_TIER:-$TIER,pool=host}")
[ -n "${CONTENT:-}" ] && content+=(--content "$CONTENT")

for c in $CASES; do
  IFS=, read -r node swap deploy <<<"$c"
  for scan in ${SCANS:-seq random}; do
    common=(--node-memory "$node" --swap "$swap" --vm-memory 320Mi --memory-size 256Mi --overcommit-percent 400
      --deployments "$deploy" --workload-runtime "$RUNTIME" --memory-scan "$scan" --stop-on-failure=false "${content[@]}")
    # The model's figures (--machine this) are measured amid the measured
    # runs, after the middle one: this shared VM's rates drift by 15-25%
    # over tens of minutes, so a probe after all of them is the furthest
    # from the first.
    measured=() simulated=""
    for ((r = 1; r <= ${REPEATS:-1}; r++)); do
      dir="$OUT/measured-$scan-$node"; ((r > 1)) && dir+="-r$r"
      if "$HEADROOM" density "${common[@]}" "${extra[@]}" --label "measured $scan $node" --out "$dir" > "$BENCH_TMP/d.log" 2>&1; then
        measured+=("$dir/steps.csv")
      else
        echo "density $scan $node failed:"; tail -3 "$BENCH_TMP/d.log"
      fi
      # A worker is a process: no guest overhead, its sequential readahead one
      # read per window, and beside its block only the Go runtime's anonymous
      # memory (RssAnon less the block: 3.0 MiB measured; the binary's text is
      # page cache the workers share). The model holds --overhead resident and
      # also adds it to the request: 3Mi admits more than density's 16Mi
      # request, but every step of these ramps fits under both.
      if ((r == (${REPEATS:-1} + 1) / 2)); then
        "$HEADROOM" sim "${common[@]}" "${sim_extra[@]}" --machine this --worker-kind process --system-reserve 0 --guest-overhead 0 --overhead 3Mi \
          --label "sim $scan $node" --out "$OUT/sim-$scan-$node" > "$BENCH_TMP/s.log" 2> "$BENCH_TMP/s.err" && simulated=yes || cat "$BENCH_TMP/s.err"
      fi
    done
    ((${#measured[@]} > 0)) && [ -n "$simulated" ] || continue
    echo "== $scan, $node node, $swap swap: $(cat "$BENCH_TMP/s.err")"
    # Columns: workers, the simulated rate, then each measured run's rate.
    tail -n +2 "$OUT/sim-$scan-$node/steps.csv" | cut -d, -f2,6 > "$BENCH_TMP/cols"
    for f in "${measured[@]}"; do
      tail -n +2 "$f" | cut -d, -f6 | paste -d, "$BENCH_TMP/cols" - > "$BENCH_TMP/cols.new"
      mv "$BENCH_TMP/cols.new" "$BENCH_TMP/cols"
    done
    if ((${#measured[@]} == 1)); then
      printf '%7s %14s %14s %7s\n' workers measured simulated ratio
      awk -F, '{r=($3>0)?$2/$3:0; printf "%7s %14.0f %14.0f %7.2f\n", $1, $3, $2, r}' "$BENCH_TMP/cols"
    else
      printf '%7s %14s %14s %14s %14s %7s %s\n' workers median min max simulated ratio within15
      awk -F, '{
          n = 0; hit = "no"
          for (i = 3; i <= NF; i++) if ($i != "") {
            v[++n] = $i; if ($i > 0 && $2 >= 0.85 * $i && $2 <= 1.15 * $i) hit = "yes"
          }
          for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
          med = (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
          printf "%7s %14.0f %14.0f %14.0f %14.0f %7.2f %s\n", $1, med, v[1], v[n], $2, (med > 0) ? $2/med : 0, hit
        }' "$BENCH_TMP/cols"
    fi
    for f in "${measured[@]}" "$OUT/sim-$scan-$node/steps.csv"; do
      dir=$(dirname "$f")
      "$HEADROOM" report "$dir" -o "$BENCH_TMP/r.html" --json | grep -E '"knee_workers"|"plateau_start_workers"' |
        tr -d ' ,"' | tr '\n' ' ' | sed "s/^/  ${dir#"$OUT/"}: /"; echo
    done
  done
done
echo "results: $OUT"
