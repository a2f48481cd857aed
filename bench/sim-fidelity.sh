#!/usr/bin/env bash
# The simulator against this machine: the same density ramp measured
# (headroom density, cgroup backend) and simulated (headroom sim --machine
# this, no other calibration), for seq and random access on two node
# sizes. Prints per step the measured and simulated aggregate pages/s and
# their ratio, per ramp both knees, and per ramp and in total how many
# steps in RAM (up to the measured knee) and on the plateau (from the
# measured plateau's start) are within 15%, and per step past the knee
# how many workers still ran at RAM speed, measured and simulated (the
# transition's lucky workers), and on the plateau how the workers' rates
# ran with the order they were made (report's plateau_creation_slope).
# Targets: within 15% per step in RAM and on the plateau, the knee
# within one worker. Needs root
# (density); removes all it made. RESULTS=dir keeps both runs per case
# (for `headroom report`, measured solid and simulated dashed). SCANS
# picks the scans (default "seq random"); TIER=zram:SIZE or
# TIER=zswap:max_pool_percent=N puts a compressed tier in front of the
# swap file in both (the model's zswap pool is N% of this host's RAM, as
# the kernel sizes it; SIM_TIER overrides the model's tier), and
# CONTENT=compress=2 (say) gives the workers' pages
# content it can compress. REPEATS=N measures each ramp N times. By
# default the model's figures are measured once, after the middle run,
# and a step counts as matched when the simulated rate is within 15% of
# some measured run (the table shows the measured median, min and max);
# with two or more runs it also holds each run against each other alone,
# as the model is held against one (how often this machine agrees with
# itself within 15%: the noise floor), and the model against each alone.
# SETTLE (default 60) is the seconds the machine rests before every
# model and every measured ramp: after a paging run, one worker alone
# here touched 59M pages/s where it had 76M, back after about 40 s.
# PAIRED=1 instead measures the model's figures right before every
# measured run and compares each run with its own model: this shared VM's
# rates drift by 15-25% over tens of minutes, and pairing separates the
# model's error from that drift (a step counts per run). It also runs one
# worker alone for 3 s (after a rest) before and after each ramp: where
# those two and the model's step 1 are within 15% of each other the
# machine held steady, and the steps of those runs are counted apart too
# (on 2026-11-27 the model's lone worker and the ramp's step 1 minutes
# later read 0.59-1.86 of each other). A lone worker only touches RAM and
# cannot see paging's cost move, so PAIRED also measures that (headroom
# sim paging: four workers a core, half out, 6 s) right before and after
# each ramp: where it and the model's own figure at that count are
# within 15% the paging held steady, and those runs' plateau steps are
# counted apart. Each ramp is then simulated once more with the model's
# paging CPU and wait scaled to what the probe after the ramp read (the
# machine's other figures unchanged, from the model's --save-machine
# scenario): the model fed the paging cost of the ramp's end.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "sim-fidelity.sh needs root" >&2; exit 2; }
OUT=${RESULTS:-$BENCH_TMP/results}
mkdir -p "$OUT"
RUNTIME=${RUNTIME:-8s}
# node, swap file, deployments
CASES=${CASES:-"1Gi,3Gi,1:10:1 2Gi,6Gi,1:16:1"}

extra=() sim_extra=() content=()
# density's node is a memory cgroup on this larger host: zram's pool is
# charged to no cgroup, nor is zswap's on cgroup v1, so the model keeps
# the pool outside the node's RAM. zswap's max_pool_percent is of the
# host's RAM, not the node's: the model gets the pool's size.
if [ -n "${TIER:-}" ]; then
  extra+=(--swap-tier "$TIER")
  sim_tier=${SIM_TIER:-}
  if [ -z "$sim_tier" ] && [[ $TIER == zswap* ]]; then
    pct=$(sed -n 's/.*max_pool_percent=\([0-9.]*\).*/\1/p' <<<"$TIER")
    pool_kib=$(awk -v p="${pct:-20}" '/^MemTotal:/ { printf "%d", $2 * p / 100 }' /proc/meminfo)
    sim_tier="zswap:${pool_kib}Ki,pool=host"
  fi
  sim_extra+=(--swap-tier "${sim_tier:-$TIER,pool=host}")
fi
[ -n "${CONTENT:-}" ] && content+=(--content "$CONTENT")

# summary DIR: report's summary of one run, on one line; each run is
# summarized once (report draws every chart), its ramp finished before.
summary() {
  local f="$BENCH_TMP/summary${1//\//_}"
  [ -s "$f" ] || "$HEADROOM" report "$1" -o "$BENCH_TMP/r.html" --json | tr -d ' \n' > "$f"
  cat "$f"
}

# knees DIR: the knee and the plateau's first step of one run (0: none).
knees() {
  local j k p
  j=$(summary "$1")
  k=$(json_field "$j" knee_workers) p=$(json_field "$j" plateau_start_workers)
  echo "${k:-0} ${p:-0}"
}

# settle lets the machine recover from the paging run before (see SETTLE):
# there is no event for that, so it waits.
settle() { sleep "${SETTLE:-60}"; }

# simulate OUT_DIR: the model of this ramp, its figures measured now; the
# figures line goes to $BENCH_TMP/s.err.
# A worker is a process: no guest overhead, its sequential readahead one
# read per window, and beside its block only the Go runtime's anonymous
# memory (RssAnon less the block: 3.0 MiB measured; the binary's text is
# page cache the workers share). The model holds --overhead resident and
# also adds it to the request: 3Mi admits more than density's 16Mi
# request, but every step of these ramps fits under both.
# The figures it measured are kept as a scenario in OUT_DIR/machine.yaml.
sim_node=(--worker-kind process --system-reserve 0 --guest-overhead 0 --overhead 3Mi)
simulate() {
  settle
  mkdir -p "$1"
  "$HEADROOM" sim "${common[@]}" "${sim_extra[@]}" --machine this --save-machine "$1/machine.yaml" "${sim_node[@]}" \
    --label "sim $scan $node" --out "$1" > "$BENCH_TMP/s.log" 2> "$BENCH_TMP/s.err" || { cat "$BENCH_TMP/s.err"; return 1; }
}

# resimulate MODEL_DIR OUT_DIR CPU_FACTOR WAIT_FACTOR: the model of
# MODEL_DIR again from its saved figures, its paging CPU and run-queue
# wait at every worker count times the factors.
resimulate() {
  local cpu wait
  cpu=$(scale_costs "$(scenario_value "$1/machine.yaml" paging-cpu)" "$3")
  wait=$(scale_costs "$(scenario_value "$1/machine.yaml" run-queue-wait)" "$4")
  "$HEADROOM" sim "${common[@]}" "${sim_extra[@]}" --scenario "$1/machine.yaml" "${sim_node[@]}" --paging-cpu "$cpu" --run-queue-wait "$wait" \
    --label "sim $scan $node, paging as after the ramp" --out "$2" > "$BENCH_TMP/s2.log" 2>&1 || { tail -3 "$BENCH_TMP/s2.log"; return 1; }
}

# scenario_value FILE KEY: KEY's value in a saved scenario, unquoted.
scenario_value() {
  sed -n "s/^$2: *//p" "$1" | tr -d "\"'"
}

# awk's us(d): a Go duration (ns, us or µs, ms, s) in microseconds.
AWK_US='function us(d) { v = d + 0; if (d ~ /ns$/) return v / 1000; if (d ~ /(us|µs)$/) return v; if (d ~ /ms$/) return v * 1000; if (d ~ /s$/) return v * 1e6; return v }'

# cost_at LIST TASKS: from a paging cost list (TASKS:DURATION,...), the
# microseconds at TASKS (empty where it has none).
cost_at() {
  awk -v list="$1" -v t="$2" "$AWK_US"' BEGIN {
      n = split(list, parts, ",")
      for (i = 1; i <= n; i++) { split(parts[i], kv, ":"); if (kv[1] + 0 == t + 0) printf "%.1f", us(kv[2]) }
    }'
}

# scale_costs LIST FACTOR: the list with every cost times FACTOR.
scale_costs() {
  awk -v list="$1" -v f="$2" "$AWK_US"' BEGIN {
      n = split(list, parts, ",")
      for (i = 1; i <= n; i++) { split(parts[i], kv, ":"); printf "%s%s:%.3fus", (i > 1) ? "," : "", kv[1], us(kv[2]) * f }
    }'
}

# measure OUT_DIR: one measured ramp; its steps.csv is appended to measured.
measure() {
  settle
  if "$HEADROOM" density "${common[@]}" "${extra[@]}" --label "measured $scan $node" --out "$1" > "$BENCH_TMP/d.log" 2>&1; then
    measured+=("$1/steps.csv")
  else
    echo "density $scan $node failed:"; tail -3 "$BENCH_TMP/d.log"
  fi
}

# witness: pages/s of one worker of the ramp's size and scan alone in RAM
# for 3 s, after a rest: the machine's state, to set beside the model's
# step 1 (the same worker, from the probe) before and after a ramp.
# A failed run reads 0 (not steady).
witness() {
  local line rate
  settle
  line=$("$HEADROOM" load --size 256Mi --scan "$scan" "${content[@]}" --duration 3s --json | tail -n 1) || true
  rate=$(json_field "$line" pages_per_sec) || true
  echo "${rate:-0}"
}

# PAGING_WORKERS: the paging witness's workers, four a core as on a
# density plateau (and as among the model's own paging counts).
PAGING_WORKERS=$((4 * $(nproc)))

# paging_witness: "CPU WAIT SLOPE", the microseconds a page paged that
# PAGING_WORKERS workers of the ramp's scan, half out, cost now in CPU
# and in wait for a core, and how their rates ran with the order they
# were made (headroom sim paging: a plateau in small). No rest first: it
# follows the lone witness, which pages nothing. A failed run reads
# "0 0 none".
paging_witness() {
  local j cpu wait slope
  j=$("$HEADROOM" sim paging --workers "$PAGING_WORKERS" --memory-scan "$scan" --window 6s --json 2> "$BENCH_TMP/p.err" | tr -d ' \n') || true
  cpu=$(json_field "$j" cpu_seconds_per_page) || true
  wait=$(json_field "$j" run_queue_seconds_per_page_in) || true
  slope=$(json_field "$j" creation_slope) || true
  awk -v c="${cpu:-0}" -v w="${wait:-0}" -v s="$slope" 'BEGIN { printf "%.1f %.1f %s", c * 1e6, w * 1e6, (s == "") ? "none" : sprintf("%+.2f", s) }'
}

# steady MODEL_STEP1 BEFORE AFTER: "yes" when the three one-worker rates
# are within 15% of each other (the machine held still from the model's
# probe to the ramp's end), else "no".
steady() {
  awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN {
      lo = a; hi = a
      if (b < lo) lo = b; if (b > hi) hi = b
      if (c < lo) lo = c; if (c > hi) hi = c
      print (lo > 0 && hi <= 1.15 * lo) ? "yes" : "no"
    }'
}

# matched_counts COLS KNEE PLATEAU_START: from lines "workers,simulated,
# measured..." (a step matched when the simulated rate is within 15% of
# some measured one), "a b c d": a of b steps in RAM matched, c of d on
# the plateau.
matched_counts() {
  awk -F, -v knee="$2" -v plat="$3" '{
      hit = 0
      for (i = 3; i <= NF; i++) if ($i != "" && $i > 0 && $2 >= 0.85 * $i && $2 <= 1.15 * $i) hit = 1
      if (knee > 0 && $1 <= knee) { ram++; ramHit += hit }
      if (plat > 0 && $1 >= plat) { pl++; plHit += hit }
    } END { printf "%d %d %d %d", ramHit, ram, plHit, pl }' "$1"
}

# count_matched COLS KNEE PLATEAU_START: prints matched_counts as "in RAM
# a/b plateau c/d" and adds them to the totals.
count_matched() {
  local a b c d
  read -r a b c d <<<"$(matched_counts "$@")"
  total_ram_hit=$((total_ram_hit + a)) total_ram=$((total_ram + b)) total_plateau_hit=$((total_plateau_hit + c)) total_plateau=$((total_plateau + d))
  last_counts=("$a" "$b" "$c" "$d")
  echo "  within 15%: in RAM (to step $2) $a of $b, plateau (from step $3) $c of $d"
}

# pair_counts COLS KNEE PLATEAU_START: from lines "workers,simulated,
# measured...", each measured run against each other one alone, as the
# model is held against a run (a step matched when the one is within 15%
# of the other), and the model against each run alone: "a b c d e f g h",
# the runs' a of b steps in RAM matched and c of d on the plateau, the
# model's e of f and g of h.
pair_counts() {
  awk -F, -v knee="$2" -v plat="$3" '
    function count(x, ref, where) {
      if (ref <= 0) return
      hit = (x >= 0.85 * ref && x <= 1.15 * ref)
      if (where == "runs") { if (inRAM) { rr++; rrHit += hit }; if (onPlat) { rp++; rpHit += hit } }
      else { if (inRAM) { mr++; mrHit += hit }; if (onPlat) { mp++; mpHit += hit } }
    }
    {
      inRAM = knee > 0 && $1 <= knee; onPlat = plat > 0 && $1 >= plat
      for (j = 3; j <= NF; j++) {
        if ($j == "") continue
        count($2, $j, "model")
        for (k = 3; k <= NF; k++) if (k != j && $k != "") count($k, $j, "runs")
      }
    } END { printf "%d %d %d %d %d %d %d %d", rrHit, rr, rpHit, rp, mrHit, mr, mpHit, mp }' "$1"
}

# noise_floor COLS KNEE PLATEAU_START: prints pair_counts (how often this
# machine's own runs of one ramp agree within 15%: the most the model
# can be asked) and adds them to the totals.
noise_floor() {
  local a b c d e f g h
  read -r a b c d e f g h <<<"$(pair_counts "$@")"
  echo "  each run against each other alone (the noise floor): in RAM $a of $b, plateau $c of $d; the model against each run alone: in RAM $e of $f, plateau $g of $h"
  runs_ram_hit=$((runs_ram_hit + a)) runs_ram=$((runs_ram + b)) runs_plateau_hit=$((runs_plateau_hit + c)) runs_plateau=$((runs_plateau + d))
  alone_ram_hit=$((alone_ram_hit + e)) alone_ram=$((alone_ram + f)) alone_plateau_hit=$((alone_plateau_hit + g)) alone_plateau=$((alone_plateau + h))
}

# ram_speed DIR: "workers count" lines, per step of a run past its knee,
# the workers still at RAM speed (report's workers_at_ram_speed).
ram_speed() {
  summary "$1" | grep -o '"workers":[0-9]*,"at_ram_speed":[0-9]*' | tr -c '0-9\n' ' ' | awk '{ print $1, $2 }'
}

# compare_ram_speed MEASURED_DIR SIM_DIR: per step past either knee where
# some worker ran at RAM speed (the transition's lucky workers), the
# measured and the simulated count, how many steps have the same count
# and how many are within one worker. Adds to the totals.
compare_ram_speed() {
  local line
  ram_speed "$1" > "$BENCH_TMP/lucky.m"
  ram_speed "$2" > "$BENCH_TMP/lucky.s"
  line=$(awk 'NR == FNR { m[$1] = $2; next }
      ($1 in m) && (m[$1] > 0 || $2 > 0) {
        list = list (n ? ", " : "") sprintf("%d: %d/%d", $1, m[$1], $2); n++
        d = m[$1] - $2; if (d == 0) same++; if (d >= -1 && d <= 1) near++
      }
      END { printf "%d %d %d %s", same, near, n, list }' "$BENCH_TMP/lucky.m" "$BENCH_TMP/lucky.s")
  read -r a b c rest <<<"$line"
  total_lucky_same=$((total_lucky_same + a)) total_lucky_near=$((total_lucky_near + b)) total_lucky=$((total_lucky + c))
  echo "  workers at RAM speed past the knee (workers: measured/simulated): ${rest:-none}; the same in $a of $c steps, within one worker in $b"
}

# compare_creation MEASURED_DIR SIM_DIR: on each run's plateau, how the
# workers' rates ran with the order they were made (report's
# plateau_creation_slope: + where the last made ran fastest, 0 where all
# ran alike; measured here random plateaus read about +0.2, seq ones
# about -0.2).
compare_creation() {
  local m s
  # A run with no plateau has no slope: json_field finds nothing.
  m=$(json_field "$(summary "$1")" plateau_creation_slope || true)
  s=$(json_field "$(summary "$2")" plateau_creation_slope || true)
  awk -v m="$m" -v s="$s" 'BEGIN {
      printf "  plateau rate by creation order (slope, + where the last made ran fastest): measured %s, simulated %s\n",
        (m == "") ? "none" : sprintf("%+.2f", m), (s == "") ? "none" : sprintf("%+.2f", s)
    }'
}

# used_range DIR FROM: the least and most of a run's aggregate rate over
# its swap-ins a second from step FROM on.
used_range() {
  awk -F, -v p="$2" 'NR > 1 && $2 >= p && $8 > 0 { u = $6 / $8; if (!n++ || u < lo) lo = u; if (n == 1 || u > hi) hi = u }
    END { if (n) printf "%.2f-%.2f", lo, hi; else printf "none" }' "$1/steps.csv"
}

# compare_used MEASURED_DIR SIM_DIR PLATEAU_START: on the plateau of a
# seq ramp (from the later of the two runs' first plateau steps), the
# pages the workers touched a page swapped in (aggregate rate over
# swap-ins a second), measured and simulated: below 1 where readahead
# went unused (the model uses every page it reads: 1).
compare_used() {
  [ "$scan" = seq ] && [ "$3" -gt 0 ] || return 0
  local m s
  m=$(used_range "$1" "$3") s=$(used_range "$2" "$3")
  echo "  pages touched a page swapped in on the plateau: measured $m, simulated $s"
}

# paste_rates COLS STEPS_CSV: appends the aggregate rate column of a
# steps.csv to COLS.
paste_rates() {
  tail -n +2 "$2" | cut -d, -f6 | paste -d, "$1" - > "$1.new"
  mv "$1.new" "$1"
}

# print_ratios COLS: from lines "workers,simulated,measured", the table
# of one measured run against its model.
print_ratios() {
  printf '%7s %14s %14s %7s\n' workers measured simulated ratio
  awk -F, '{r=($3>0)?$2/$3:0; printf "%7s %14.0f %14.0f %7.2f\n", $1, $3, $2, r}' "$1"
}

total_ram_hit=0 total_ram=0 total_plateau_hit=0 total_plateau=0 total_lucky_same=0 total_lucky_near=0 total_lucky=0
steady_ram_hit=0 steady_ram=0 steady_plateau_hit=0 steady_plateau=0 steady_runs=()
paging_plateau_hit=0 paging_plateau=0 paging_runs=() after_plateau_hit=0 after_plateau=0
runs_ram_hit=0 runs_ram=0 runs_plateau_hit=0 runs_plateau=0 alone_ram_hit=0 alone_ram=0 alone_plateau_hit=0 alone_plateau=0
for c in $CASES; do
  IFS=, read -r node swap deploy <<<"$c"
  for scan in ${SCANS:-seq random}; do
    common=(--node-memory "$node" --swap "$swap" --vm-memory 320Mi --memory-size 256Mi --overcommit-percent 400
      --deployments "$deploy" --workload-runtime "$RUNTIME" --memory-scan "$scan" --stop-on-failure=false "${content[@]}")
    measured=()
    if [ -n "${PAIRED:-}" ]; then
      for ((r = 1; r <= ${REPEATS:-1}; r++)); do
        sim="$OUT/sim-$scan-$node-r$r" dir="$OUT/measured-$scan-$node-r$r"
        simulate "$sim" || continue
        figures=$(cat "$BENCH_TMP/s.err")
        before=$(witness)
        read -r cpu_before wait_before slope_before <<<"$(paging_witness)"
        measure "$dir"
        [ -f "$dir/steps.csv" ] || continue
        after=$(witness)
        read -r cpu_after wait_after slope_after <<<"$(paging_witness)"
        model=$(sed -n 2p "$sim/steps.csv" | cut -d, -f6)
        held=$(steady "$model" "$before" "$after")
        cpu_model=$(cost_at "$(scenario_value "$sim/machine.yaml" paging-cpu)" "$PAGING_WORKERS")
        wait_model=$(cost_at "$(scenario_value "$sim/machine.yaml" run-queue-wait)" "$PAGING_WORKERS")
        # CPU and wait add up to a page's cost to the worker paging it.
        paging_held=$(steady "$(awk -v a="${cpu_model:-0}" -v b="${wait_model:-0}" 'BEGIN { print a + b }')" \
          "$(awk -v a="$cpu_before" -v b="$wait_before" 'BEGIN { print a + b }')" "$(awk -v a="$cpu_after" -v b="$wait_after" 'BEGIN { print a + b }')")
        echo "== $scan, $node node, $swap swap, run $r, its model probed just before it: $figures"
        awk -v m="$model" -v b="$before" -v a="$after" -v held="$held" 'BEGIN {
            printf "  one worker alone: model %.1fM, measured %.1fM before the ramp and %.1fM after it; machine steady: %s\n", m / 1e6, b / 1e6, a / 1e6, held
          }'
        echo "  paging, $PAGING_WORKERS $scan workers half out, CPU + wait for a core µs a page: model ${cpu_model:-?} + ${wait_model:-?}, before the ramp $cpu_before + $wait_before, after it $cpu_after + $wait_after; paging steady: $paging_held"
        tail -n +2 "$sim/steps.csv" | cut -d, -f2,6 > "$BENCH_TMP/cols"
        paste_rates "$BENCH_TMP/cols" "$dir/steps.csv"
        print_ratios "$BENCH_TMP/cols"
        read -r mk mp <<<"$(knees "$dir")"
        read -r sk sp <<<"$(knees "$sim")"
        echo "  knee measured $mk, simulated $sk; plateau from measured $mp, simulated $sp"
        count_matched "$BENCH_TMP/cols" "$mk" "$mp"
        compare_ram_speed "$dir" "$sim"
        compare_creation "$dir" "$sim"
        compare_used "$dir" "$sim" "$((mp > sp ? mp : sp))"
        echo "  the paging witness's rate by creation order: $slope_before before the ramp, $slope_after after it"
        if [ "$held" = yes ]; then
          steady_ram_hit=$((steady_ram_hit + last_counts[0])) steady_ram=$((steady_ram + last_counts[1]))
          steady_plateau_hit=$((steady_plateau_hit + last_counts[2])) steady_plateau=$((steady_plateau + last_counts[3]))
        fi
        steady_runs+=("$held")
        if [ "$paging_held" = yes ]; then
          paging_plateau_hit=$((paging_plateau_hit + last_counts[2])) paging_plateau=$((paging_plateau + last_counts[3]))
        fi
        paging_runs+=("$paging_held")
        # The model again with the paging cost the probe after the ramp read.
        if awk -v c="$cpu_after" -v w="$wait_after" -v mc="${cpu_model:-0}" -v mw="${wait_model:-0}" 'BEGIN { exit !(c > 0 && w > 0 && mc > 0 && mw > 0) }' &&
          resimulate "$sim" "$sim-paging-after" "$(awk -v a="$cpu_after" -v m="$cpu_model" 'BEGIN { print a / m }')" \
            "$(awk -v a="$wait_after" -v m="$wait_model" 'BEGIN { print a / m }')"; then
          tail -n +2 "$sim-paging-after/steps.csv" | cut -d, -f2,6 > "$BENCH_TMP/cols2"
          paste_rates "$BENCH_TMP/cols2" "$dir/steps.csv"
          read -r a b c d <<<"$(matched_counts "$BENCH_TMP/cols2" "$mk" "$mp")"
          after_plateau_hit=$((after_plateau_hit + c)) after_plateau=$((after_plateau + d))
          echo "  with the paging cost read after the ramp: plateau ratios $(awk -F, -v p="$mp" 'p > 0 && $1 >= p && $3 > 0 { printf "%s%.2f", n++ ? " " : "", $2 / $3 }' "$BENCH_TMP/cols2"); within 15%: plateau $c of $d"
        fi
      done
      continue
    fi
    # The model's figures (--machine this) are measured amid the measured
    # runs, after the middle one: a probe after all of them is the
    # furthest from the first.
    simulated=""
    for ((r = 1; r <= ${REPEATS:-1}; r++)); do
      dir="$OUT/measured-$scan-$node"; ((r > 1)) && dir+="-r$r"
      measure "$dir"
      if ((r == (${REPEATS:-1} + 1) / 2)); then
        simulate "$OUT/sim-$scan-$node" && simulated=yes
      fi
    done
    ((${#measured[@]} > 0)) && [ -n "$simulated" ] || continue
    echo "== $scan, $node node, $swap swap: $(cat "$BENCH_TMP/s.err")"
    # Columns: workers, the simulated rate, then each measured run's rate.
    tail -n +2 "$OUT/sim-$scan-$node/steps.csv" | cut -d, -f2,6 > "$BENCH_TMP/cols"
    for f in "${measured[@]}"; do
      paste_rates "$BENCH_TMP/cols" "$f"
    done
    if ((${#measured[@]} == 1)); then
      print_ratios "$BENCH_TMP/cols"
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
    # In RAM up to the earliest measured knee, the plateau from the latest
    # measured start: the steps every run agrees on.
    knee=0 plateau=0
    for f in "${measured[@]}" "$OUT/sim-$scan-$node/steps.csv"; do
      dir=$(dirname "$f")
      read -r k p <<<"$(knees "$dir")"
      echo "  ${dir#"$OUT/"}: knee $k, plateau from $p"
      [ "$dir" = "$OUT/sim-$scan-$node" ] && continue
      ((knee == 0 || (k > 0 && k < knee))) && knee=$k
      ((p > plateau)) && plateau=$p
    done
    count_matched "$BENCH_TMP/cols" "$knee" "$plateau"
    ((${#measured[@]} > 1)) && noise_floor "$BENCH_TMP/cols" "$knee" "$plateau"
    for f in "${measured[@]}"; do
      echo "  ${f#"$OUT/"}:"
      compare_ram_speed "$(dirname "$f")" "$OUT/sim-$scan-$node"
      compare_creation "$(dirname "$f")" "$OUT/sim-$scan-$node"
    done
  done
done
echo "total within 15%: in RAM $total_ram_hit of $total_ram steps, plateau $total_plateau_hit of $total_plateau steps"
if ((runs_ram + runs_plateau > 0)); then
  echo "the measured runs against each other alone (the noise floor): in RAM $runs_ram_hit of $runs_ram, plateau $runs_plateau_hit of $runs_plateau; the model against each run alone: in RAM $alone_ram_hit of $alone_ram, plateau $alone_plateau_hit of $alone_plateau"
fi
echo "transition steps with workers at RAM speed: $total_lucky; the model had as many in $total_lucky_same, within one worker in $total_lucky_near"
if ((${#steady_runs[@]} > 0)); then
  held=$(printf '%s\n' "${steady_runs[@]}" | grep -c yes || true)
  echo "runs the machine held steady through: $held of ${#steady_runs[@]}; their steps within 15%: in RAM $steady_ram_hit of $steady_ram, plateau $steady_plateau_hit of $steady_plateau"
  held=$(printf '%s\n' "${paging_runs[@]}" | grep -c yes || true)
  echo "runs whose paging cost held steady: $held of ${#paging_runs[@]}; their plateau steps within 15%: $paging_plateau_hit of $paging_plateau"
  echo "the model with the paging cost read after each ramp: plateau steps within 15%: $after_plateau_hit of $after_plateau"
fi
echo "results: $OUT"
