#!/usr/bin/env bash
# Does ballooning let a node hold more VMs at the same per-VM throughput
# than swap alone? One density ramp of micro-VMs three times, the agent on
# the node each time:
#   swap      swap allowances and eviction only
#   headroom  plus --balloon (memory states, guest-aware targets)
#   mom       plus --balloon mom (oVirt MOM's balloon.rules)
# Each 512 MiB guest runs a 128 MiB random-access workload beside 192 MiB
# of clean page cache (--guest-cache: memory a balloon reclaims without
# I/O, which host swap must write out); a 1.5 GiB node, a 2 GiB swap file.
# Per step: aggregate and mean per-VM pages/s, the ratio to the swap-only
# run, swap-outs/s, evictions and OOM kills; per run: the most VMs the
# node held without an eviction, a failed step or an OOM kill. Needs root; removes
# all it made. RESULTS=dir keeps the results (for `headroom report`);
# DEPLOYMENTS, RUNTIME, MEMORY_SIZE (the workload, 128Mi) and GUEST_CACHE
# (192Mi) change the ramp. RATE=pages/s caps each workload (--rate): a VM
# then keeps its throughput exactly while its memory serves it, whatever
# share of the two cores the TCG guests get, and the summary also says how
# many VMs each setup held with every VM within 10% of that rate. PACE
# (50ms) is then how often each workload wakes (--pace): a TCG guest's
# wake-up costs about 3 ms of CPU here, and at the load's default (10ms)
# five VMs at 1M pages/s kept the two cores busy.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "density-balloon.sh needs root" >&2; exit 2; }
OUT=${RESULTS:-$BENCH_TMP/results}
mkdir -p "$OUT"
DEPLOY=${DEPLOYMENTS:-1,3,5,7}
RUNTIME=${RUNTIME:-20s}

# SETUPS="headroom mom" reruns only those (the others' results stay in RESULTS).
for setup in ${SETUPS:-swap headroom mom}; do
  balloon=() rate=()
  [ "$setup" != swap ] && balloon=(--balloon --balloon-policy "$setup")
  [ -n "${RATE:-}" ] && rate=(--rate "$RATE" --pace "${PACE:-50ms}")
  "$HEADROOM" density --backend qemu --agent "${balloon[@]}" --node-memory 1536Mi --swap 2Gi \
    --vm-memory 512Mi --memory-size "${MEMORY_SIZE:-128Mi}" --guest-cache "${GUEST_CACHE:-192Mi}" --overcommit-percent 400 \
    --deployments "$DEPLOY" --workload-runtime "$RUNTIME" --memory-scan random --stop-on-failure=false "${rate[@]}" \
    --label "$setup" --out "$OUT/$setup" > "$BENCH_TMP/$setup.log" 2>&1 || { echo "$setup run failed:"; tail -3 "$BENCH_TMP/$setup.log"; }
done
for setup in swap headroom mom; do
  [ -f "$OUT/$setup/steps.csv" ] || continue
  tail -n +2 "$OUT/$setup/steps.csv" | awk -F, -v s="$setup" '{print s, $2, $6, $9, $16, $17, ($4=="true"?"failed":"ok")}'
done > "$BENCH_TMP/rows"

printf '%-9s %7s %12s %12s %8s %11s %9s %4s %s\n' setup VMs agg_pages/s per_VM vs_swap swapouts/s evictions oom status
awk '
  {rows[++n]=$0; if ($1=="swap") base[$2]=$3}
  END {for (i=1;i<=n;i++) {split(rows[i],f," "); r=(base[f[2]]>0)?sprintf("%.2f", f[3]/base[f[2]]):"-";
       printf "%-9s %7s %12.0f %12.0f %8s %11.0f %9s %4s %s\n", f[1], f[2], f[3], f[3]/f[2], r, f[4], f[5], f[6], f[7]}}' "$BENCH_TMP/rows"
echo
# The most VMs the node held: the largest step that ran without a failure,
# an eviction or an OOM kill. (Per-VM rates fall with the VM count in RAM
# too — TCG guests share two cores — so compare them across setups at the
# same step, the vs_swap column, not against the one-VM step.)
awk '
  {rows[++n]=$0; seen[$1]=1}
  END {for (i=1;i<=n;i++) {split(rows[i],f," "); if (f[7]=="ok" && f[5]==0 && f[6]==0 && f[2]+0>held[f[1]]) held[f[1]]=f[2]+0}
       for (s in seen) printf "%-9s holds %s VMs without an eviction, failure or OOM kill\n", s, held[s]+0}' "$BENCH_TMP/rows" | sort
# With a rate: the most VMs held with every VM at 90% of the rate or more
# (the slowest VM of the step, from its per-worker rates), over the whole
# step and in steady state: without each worker's first STARTUP seconds
# (default 5), where a workload populates its memory — seven TCG guests
# with all the RAM they want run at 0.5-0.9 of the rate there (measured),
# and a guest its balloon took to its floor gets its memory back then.
if [ -n "${RATE:-}" ] && command -v python3 >/dev/null; then
  for setup in swap headroom mom; do
    [ -f "$OUT/$setup/run.json" ] || continue
    python3 - "$OUT/$setup" "$setup" "$RATE" "${STARTUP:-5}" <<'PY'
import collections, json, os, sys
out, setup, rate, startup = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
run = json.load(open(os.path.join(out, "run.json")))
units = {"k": 1e3, "M": 1e6, "G": 1e9}
target = float(rate[:-1]) * units[rate[-1]] if rate[-1] in units else float(rate)
steady = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0.0]))  # step -> worker -> [pages, seconds]
workers = os.path.join(out, "workers.jsonl")
if os.path.exists(workers):
    for line in open(workers):
        r = json.loads(line)
        if r.get("type") == "interval" and r["elapsed_seconds"] > startup:
            acc = steady[r["step"]][r["worker"]]
            acc[0] += r["pages"]
            acc[1] += r["interval_seconds"]
per_vm = {
    "whole step": lambda s: [w.get("pages_per_sec", 0) for w in s.get("per_worker") or []],
    "steady state": lambda s: [pages / secs for pages, secs in steady[s["index"]].values() if secs > 0],
}
for label, rates_of in per_vm.items():
    held, rows = 0, []
    for s in run["steps"]:
        rates = rates_of(s)
        slowest = min(rates) if rates else 0
        ok = not s["failed"] and s["evictions"] == 0 and s["oom_kills"] == 0 and len(rates) == s["workers"] and slowest >= 0.9 * target
        rows.append("%d: slowest %.2f×" % (s["workers"], slowest / target))
        if ok:
            held = max(held, s["workers"])
    print("%-9s holds %d VMs with every VM at 90%% of %s pages/s or more, %s (%s)" % (setup, held, rate, label, ", ".join(rows)))
PY
  done
fi
echo "results: $OUT (headroom report $OUT/swap $OUT/headroom $OUT/mom)"
