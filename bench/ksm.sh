#!/usr/bin/env bash
# KSM strategies compared in one run on the same workload: 8 processes of
# `headroom load --size 256Mi --content dup=0.8 --mergeable --scan none` in a
# 3 GiB node cgroup (so the node is at 70% of its RAM), merged by
#   defaults   the kernel's defaults (pages_to_scan 100, sleep 20 ms)
#   brute      the seed's pages_to_scan 1,000,000,000
#   kubevirt   KubeVirt's/ksmtuned's rules as if under pressure: start at 64
#              pages, +300 every 10 s up to 1250, sleep 100 ms × 16 GiB / RAM
#   advisor    the kernel's advisor (advisor_mode scan-time, its defaults)
#   governor   headroom agent --ksm governor on the node
# For each: seconds to 90% of the saving brute force reaches, ksmd
# CPU-seconds to get there, MiB saved per ksmd CPU-second, and ksmd's CPU
# share in steady state (10 s from 5 s after it converged). TRACE=file
# appends every 0.2 s sample: strategy, seconds, MiB saved, ksmd
# CPU-seconds, pages_to_scan and full scans (how the advisor paces ksmd:
# docs/sim.md). Then ksmtuned (apt) runs 30 s on the same
# workload. WORKERS=vms runs the same loads inside 8 identical micro-VMs
# of 384 MiB (their QEMUs in a 4 GiB node): QEMU marks guest RAM mergeable,
# and the guests' kernels and initramfs merge too. Needs root; puts KSM
# back (run 0, unmerged, defaults).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "ksm.sh needs root" >&2; exit 2; }
K=/sys/kernel/mm/ksm
KSMD=$(for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = ksmd ] && basename $p && break; done)
[ -n "$KSMD" ] || { echo "no ksmd: this kernel has no KSM" >&2; exit 2; }
MAX=${MAX_SECONDS:-240}
NODE=/sys/fs/cgroup/memory/headroom-bench-ksm
ksm_reset() {
  echo 0 > $K/run; echo 2 > $K/run
  while [ "$(cat $K/pages_sharing)" != 0 ]; do sleep 0.2; done
  # The advisor refuses manual settings while it is on: off first.
  if [ -f $K/advisor_mode ]; then echo none > $K/advisor_mode; fi
  echo 0 > $K/run; echo 100 > $K/pages_to_scan; echo 20 > $K/sleep_millisecs
}
cleanup_hooks+=("ksm_reset" "rmdir $NODE 2>/dev/null")
ksmd_cpu() { awk '{printf "%.2f", ($14+$15)/100}' /proc/$KSMD/stat; }
profit_mib() { echo $(( $(cat $K/general_profit) >> 20 )); }

# STRATEGIES="brute governor" runs only those (and ksmtuned if named).
only() { [ -z "${STRATEGIES:-}" ] || [[ " $STRATEGIES " == *" $1 "* ]]; }

WORKERS=${WORKERS:-processes}
[ "$WORKERS" = vms ] && "$HEADROOM" vm image > /dev/null
pids=()
start_loads() {
  local limit=$((3 << 30))
  [ "$WORKERS" = vms ] && limit=$((4 << 30))
  mkdir -p $NODE && echo $limit > $NODE/memory.limit_in_bytes
  pids=()
  for i in 1 2 3 4 5 6 7 8; do
    if [ "$WORKERS" = vms ]; then
      "$HEADROOM" vm run --memory 384Mi --cgroup headroom-bench-ksm -- load --size 256Mi --content dup=0.8 \
        --scan none --duration 3600s --seed $i > "$BENCH_TMP/load$i.out" 2>&1 &
    else
      sh -c 'echo $$ > '$NODE'/cgroup.procs && exec "$@"' sh "$HEADROOM" load --size 256Mi --content dup=0.8 --mergeable \
        --scan none --duration 3600s --seed $i > "$BENCH_TMP/load$i.out" &
    fi
    pids+=($!)
  done
  for i in 1 2 3 4 5 6 7 8; do
    until grep -q populated "$BENCH_TMP/load$i.out" 2>/dev/null; do sleep 0.1; done
  done
}
stop_loads() { kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; true; }
cleanup_hooks+=("stop_loads")

# watch NAME LIMIT: sample every 0.2 s from now; stop 15 s after the
# saving converged (99% of $REF MiB), or at LIMIT seconds. Prints one
# result line: the 90% point, and ksmd's CPU share over the last 10 of
# those 15 s (steady state, past the scan that finds nothing more).
watch() {
  local name=$1 limit=$2 t0 cpu0 t cpu p hit= hitcpu= hitp= conv= convcpu= after=
  t0=$(date +%s.%N); cpu0=$(ksmd_cpu)
  while :; do
    sleep 0.2
    t=$(echo "$(date +%s.%N) - $t0" | bc); cpu=$(echo "$(ksmd_cpu) - $cpu0" | bc); p=$(profit_mib)
    [ -n "${TRACE:-}" ] && echo "$name $t $p $cpu $(cat $K/pages_to_scan) $(cat $K/full_scans)" >> "$TRACE"
    if [ -z "$hit" ] && [ "$p" -ge $(( REF * 9 / 10 )) ]; then hit=$t; hitcpu=$cpu; hitp=$p; fi
    if [ -z "$conv" ] && [ "$p" -ge $(( REF * 99 / 100 )) ]; then conv=$t; fi
    if [ -n "$conv" ] && [ -z "$convcpu" ] && [ "$(echo "$t >= $conv + 5" | bc)" = 1 ]; then convcpu=$cpu; conv=$t; fi
    if [ -n "$convcpu" ] && [ "$(echo "$t >= $conv + 10" | bc)" = 1 ]; then after=$(echo "($cpu - $convcpu) * 10" | bc); break; fi
    [ "$(echo "$t >= $limit" | bc)" = 1 ] && break
  done
  [ -n "$after" ] || after=-
  if [ -n "$hit" ]; then
    printf '%-9s %8.1f %9.2f %11.0f %10s%%\n' "$name" "$hit" "$hitcpu" "$(echo "$hitp / $hitcpu" | bc -l)" "$after"
  else
    printf '%-9s %8s %9.2f %11s %10s   (%d MiB saved in %d s)\n' "$name" ">$limit" "$cpu" "-" "-" "$p" "$limit"
  fi
}

ksm_reset
start_loads
# Reference: what brute force saves once it has stopped finding more.
echo 1000000000 > $K/pages_to_scan; echo 1 > $K/run
prev=-1; while :; do sleep 1; p=$(profit_mib); [ "$p" = "$prev" ] && [ "$p" -gt 0 ] && break; prev=$p; done
REF=$p
ksm_reset
echo "reference saving (brute force, converged): $REF MiB of 8 × 256 MiB (dup=0.8, $WORKERS)"
printf '%-9s %8s %9s %11s %11s\n' strategy to90%_s cpu_s MiB/cpu_s cpu_after

if only defaults; then
  echo 100 > $K/pages_to_scan; echo 20 > $K/sleep_millisecs; echo 1 > $K/run
  watch defaults "$MAX"; ksm_reset
fi

if only brute; then
  echo 1000000000 > $K/pages_to_scan; echo 20 > $K/sleep_millisecs; echo 1 > $K/run
  watch brute "$MAX"; ksm_reset
fi

if only kubevirt; then
  ram_kb=$(awk '/MemTotal/{print $2}' /proc/meminfo)
  sleep_ms=$(( 100 * 16 * 1024 * 1024 / ram_kb ))
  ( n=64; while :; do echo $n > $K/pages_to_scan; echo $sleep_ms > $K/sleep_millisecs; echo 1 > $K/run; sleep 10
      n=$(( n + 300 > 1250 ? 1250 : n + 300 )); done ) &
  rules=$!
  watch kubevirt "$MAX"; kill $rules; wait $rules 2>/dev/null || true; ksm_reset
fi

if only advisor && [ -f $K/advisor_mode ]; then
  echo scan-time > $K/advisor_mode; echo 1 > $K/run
  watch advisor "$MAX"; ksm_reset
fi

if only governor; then
"$HEADROOM" agent --scope /headroom-bench-ksm --workloads-dir "$BENCH_TMP" --listen "" --state-dir "$BENCH_TMP/state" --ksm governor \
  > "$BENCH_TMP/agent.jsonl" 2> "$BENCH_TMP/agent.log" &
agent=$!
watch governor "$MAX"; kill -TERM $agent; wait $agent || true; ksm_reset
grep '"set_ksm"' "$BENCH_TMP/agent.jsonl" | sed 's/.*"reason":"\([^"]*\)".*/  governor: \1/'
fi

# Real ksmtuned on the same workload.
if only ksmtuned && ! command -v ksmtuned >/dev/null; then
  apt-get install -y -qq --no-install-recommends ksmtuned >/dev/null 2>&1 || true
fi
if only ksmtuned && command -v ksmtuned >/dev/null; then
  # ksmtuned forks its loop into the background and writes its PID to
  # PIDFILE: that PID is the one to stop.
  printf 'KSM_MONITOR_INTERVAL=5\nDEBUG=1\nLOGFILE=%s\nPIDFILE=%s\n' "$BENCH_TMP/ksmtuned.log" "$BENCH_TMP/ksmtuned.pid" > "$BENCH_TMP/ksmtuned.conf"
  # ksmtuned reads /etc/ksmtuned.conf: point it at ours for the run.
  [ -f /etc/ksmtuned.conf ] && cp /etc/ksmtuned.conf "$BENCH_TMP/ksmtuned.conf.orig"
  cp "$BENCH_TMP/ksmtuned.conf" /etc/ksmtuned.conf
  cleanup_hooks+=("[ -f $BENCH_TMP/ksmtuned.conf.orig ] && cp $BENCH_TMP/ksmtuned.conf.orig /etc/ksmtuned.conf")
  PIDFILE="$BENCH_TMP/ksmtuned.pid" ksmtuned
  tuned=$(cat "$BENCH_TMP/ksmtuned.pid")
  cleanup_hooks+=("kill $tuned 2>/dev/null")
  sleep 30
  kill "$tuned" 2>/dev/null || true
  echo "ksmtuned, 30 s: run=$(cat $K/run), pages_sharing=$(cat $K/pages_sharing); its log:"
  sed 's/^/  /' "$BENCH_TMP/ksmtuned.log" | tail -4
fi
stop_loads
