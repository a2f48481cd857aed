#!/usr/bin/env bash
# `headroom agent` overhead while watching 200 workloads (targets: under 1%
# of a core, RSS under 30 MiB): a scope cgroup with 200 child cgroups, each
# holding one sleeping process, watched for 30 s beside an idle Go process
# waking as often as the agent (internal/testenv/idlego: this machine's
# floor in the same window; the CPU target is on the agent's share above
# it). Needs root (cgroup v1); removes everything on exit.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "agent-overhead.sh needs root" >&2; exit 2; }
workloads=${WORKLOADS:-200}
seconds=${SECONDS_PER_RUN:-30}
scope=headroom-bench-agent-$$
root=/sys/fs/cgroup/memory/$scope
meta=$BENCH_TMP/workloads
mkdir -p "$meta" "$root"
remove_scope() {
  local d p
  for d in "$root"/*/; do
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for d in "$root"/*/; do
    # Killed processes leave the cgroup once reaped: wait (bounded) for that.
    for _ in $(seq 100); do [ -z "$(cat "$d/cgroup.procs" 2>/dev/null)" ] && break; sleep 0.05; done
    rmdir "$d"
  done
  rmdir "$root"
}
cleanup_hooks+=(remove_scope)
echo $((64 << 30)) > "$root/memory.limit_in_bytes"
for i in $(seq "$workloads"); do
  mkdir "$root/vm-$i"
  echo $((1 << 30)) > "$root/vm-$i/memory.limit_in_bytes"
  printf '{"name":"vm-%d","priority":%d,"memoryRequest":"512Mi"}\n' "$i" "$((i % 7))" > "$meta/vm-$i.json"
  # Detached (not a job of this script), so killing it prints nothing.
  (setsid sh -c "echo \$\$ > $root/vm-$i/cgroup.procs && exec sleep 3600" </dev/null >/dev/null 2>&1 &)
done
"$HEADROOM" agent --scope "$scope" --workloads-dir "$meta" --listen 127.0.0.1:0 --state-dir "$BENCH_TMP/state" ${AGENT_ARGS:-} >"$BENCH_TMP/decisions" 2>"$BENCH_TMP/log" &
agent=$!
cleanup_hooks+=("kill $agent 2>/dev/null; wait $agent 2>/dev/null")
interval=$("$HEADROOM" agent --scope "$scope" ${AGENT_ARGS:-} --print-config | awk '$1 == "intervalSeconds:" {print $2}')
CGO_ENABLED=0 go build -trimpath -o "$BENCH_TMP/idlego" ./internal/testenv/idlego
"$BENCH_TMP/idlego" -interval "${interval}s" >/dev/null &
idle=$!
cleanup_hooks+=("kill $idle 2>/dev/null; wait $idle 2>/dev/null")
sleep 3 # let it discover the workloads and settle before measuring
ticks=$(getconf CLK_TCK)
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
a0=$(cputicks "$agent") i0=$(cputicks "$idle")
sleep "$seconds"
a1=$(cputicks "$agent") i1=$(cputicks "$idle")
rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$agent/status")
hwm_kib=$(awk '/VmHWM/ {print $2}' "/proc/$agent/status")
applied=$(grep -c '"set_swap"' "$BENCH_TMP/decisions" || true)
share() { awk -v d="$1" -v t="$ticks" -v s="$seconds" 'BEGIN{printf "%.2f", 100 * d / t / s}'; }
cpu=$(share $((a1 - a0))) floor=$(share $((i1 - i0)))
own=$(awk -v c="$cpu" -v f="$floor" 'BEGIN{printf "%.2f", c - f}')
printf 'workloads watched: %d (swap allowances applied: %d)\n' "$workloads" "$applied"
printf 'agent CPU: %s%% of a core over %d s; an idle Go process waking every %s s: %s%%; the agent'"'"'s own: %s%% (target < 1%%)\n' "$cpu" "$seconds" "$interval" "$floor" "$own"
printf 'agent RSS: %.1f MiB, peak %.1f MiB (target < 30 MiB)\n' "$(awk -v k="$rss_kib" 'BEGIN{print k/1024}')" "$(awk -v k="$hwm_kib" 'BEGIN{print k/1024}')"
awk -v c="$own" -v h="$hwm_kib" 'BEGIN{exit !(c >= 1 || h >= 30*1024)}' && exit 1 || exit 0
