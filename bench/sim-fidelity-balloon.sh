#!/usr/bin/env bash
# The simulator's balloons against this machine: bench/density-balloon.sh's
# ramp of micro-VMs (swap alone, headroom's balloon controller, MOM's rules;
# each workload capped at RATE pages/s) measured, then the same ramp in
# `headroom sim` with the agent's real policy in the loop and the node's
# figures below (TCG guests: no
# --machine this, which measures processes). Prints per setup and step,
# measured and simulated: whether the step held (no eviction, failure or
# OOM kill), its evictions, and the slowest VM's share of the rate over
# the whole step, with their ratio. Needs root; removes all it made.
# RESULTS=dir keeps both runs per setup (`headroom report dir/headroom
# dir/sim-headroom` overlays them); DEPLOYMENTS (1,3,5,6,7), RATE (1M),
# MEMORY_SIZE (32Mi), GUEST_CACHE (288Mi) and RUNTIME (20s) change it.
# MEASURED=dir
# compares an earlier density-balloon.sh RESULTS dir instead of measuring.
# The measured ramp's own summary (its "holds" lines first) stays in
# RESULTS/density-balloon.txt.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || [ -n "${MEASURED:-}" ] || { echo "sim-fidelity-balloon.sh needs root" >&2; exit 2; }
OUT=${RESULTS:-$BENCH_TMP/results}
mkdir -p "$OUT"
export DEPLOYMENTS=${DEPLOYMENTS:-1,3,5,6,7} RATE=${RATE:-1M} MEMORY_SIZE=${MEMORY_SIZE:-32Mi} GUEST_CACHE=${GUEST_CACHE:-288Mi} RUNTIME=${RUNTIME:-20s}
MEASURED=${MEASURED:-}
if [ -z "$MEASURED" ]; then
  RESULTS="$OUT" bash bench/density-balloon.sh > "$OUT/density-balloon.txt" 2>&1 || { tail -5 "$OUT/density-balloon.txt"; exit 1; }
  MEASURED=$OUT
  grep -E "holds" "$OUT/density-balloon.txt" || true
  echo
fi

for setup in swap headroom mom; do
  [ -f "$MEASURED/$setup/run.json" ] || continue
  balloon=()
  [ "$setup" != swap ] && balloon=(--balloon --balloon-policy "$setup")
  # The agent as density runs it: swap utilization only, the swap-rate
  # thresholds off.
  "$HEADROOM" sim --node-memory 1536Mi --system-reserve 0 --cpus 2 --touch-rate 10M --populate-rate 10000 \
    --swap 2Gi --swap-read-iops 20000 --swap-write-iops 20000 --swap-latency 200us --paging-cpu 150us \
    --vm-memory 512Mi --memory-size "$MEMORY_SIZE" --guest-overhead 100Mi --overhead 40Mi --guest-cache "$GUEST_CACHE" \
    --overcommit-percent 400 --deployments "$DEPLOYMENTS" --workload-runtime "$RUNTIME" --memory-scan random --rate "$RATE" \
    --stop-on-failure=false --agent --max-swap-in-pages-per-sec 0 --max-swap-out-pages-per-sec 0 "${balloon[@]}" \
    --label "sim $setup" --out "$OUT/sim-$setup" > "$BENCH_TMP/sim.log" 2>&1 || { echo "sim $setup failed:"; tail -3 "$BENCH_TMP/sim.log"; continue; }
done

python3 - "$MEASURED" "$OUT" "$RATE" <<'PY'
import json, os, sys
measured, out, rate = sys.argv[1:4]
units = {"k": 1e3, "M": 1e6, "G": 1e9}
target = float(rate[:-1]) * units[rate[-1]] if rate[-1] in units else float(rate)

def steps(d):
    try:
        run = json.load(open(os.path.join(d, "run.json")))
    except OSError:
        return {}
    rows = {}
    for s in run["steps"]:
        rates = [w.get("pages_per_sec", 0) for w in s.get("per_worker") or []]
        slowest = min(rates) / target if len(rates) == s["workers"] and rates else 0
        held = not s["failed"] and s["evictions"] == 0 and s["oom_kills"] == 0
        rows[s["workers"]] = (held, s["evictions"], slowest)
    return rows

print("%-9s %4s  %-22s  %-22s  %s" % ("setup", "VMs", "measured held/evic/slow", "simulated held/evic/slow", "slowest sim/measured"))
agree = total = 0
for setup in ("swap", "headroom", "mom"):
    m, s = steps(os.path.join(measured, setup)), steps(os.path.join(out, "sim-" + setup))
    if not m or not s:
        continue
    for vms in sorted(m):
        mh, me, ms = m[vms]
        sh, se, ss = s.get(vms, (False, 0, 0))
        total += 1
        agree += mh == sh
        ratio = "%.2f" % (ss / ms) if ms > 0 and ss > 0 else "-"
        print("%-9s %4d  %-5s %2d %6.2f          %-5s %2d %6.2f           %s" % (setup, vms, "yes" if mh else "no", me, ms, "yes" if sh else "no", se, ss, ratio))
print("held or not: the model agrees on %d of %d steps" % (agree, total))
PY
echo "results: $OUT"
