#!/usr/bin/env bash
# The head-to-head on a real node (issue 56): the same memory burst (two
# 1200 MiB pods, then a third of the lowest priority, on a 1.5 GiB node
# with 2 GiB swap) under the kubelet alone, the kubelet with OpenShift's
# node tuning, and the kubelet with headroom's agent, RUNS times each
# (default 3; SETUPS, a regexp, picks setups). Prints one row per run and the mean per configuration, as
# the table in docs/validation/kubernetes.md. Needs root, containerd, runc
# and the control plane's binaries (built into the cache if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "kubelet-head-to-head.sh needs root" >&2; exit 2; }
runs=${RUNS:-3}
export HEADROOM_KUBE_BIN="${HEADROOM_KUBE_BIN:-$(hack/kube-binaries.sh)}"
# The go test output, whole (a failed run's reasons), is kept here.
out=${BENCH_LOG:-$(mktemp /tmp/kubelet-head-to-head.XXXXXX.log)}
echo "go test output: $out" >&2
status=0
go test -tags system -count "$runs" -timeout 90m -run '^$' -bench "^BenchmarkSystemRealKubeletHeadToHead\$/${SETUPS:-}" -benchtime 1x \
  ./internal/kube/ >"$out" 2>&1 || status=$?
grep -E '^Benchmark|evicted:|--- FAIL' "$out" >&2
awk '
/^BenchmarkSystemRealKubeletHeadToHead\// {
  split($1, name, "/"); cfg = name[2]; sub(/-[0-9]+$/, "", cfg); delete row
  for (i = 3; i < NF; i += 2) { v[cfg, $(i+1)] += $i; row[$(i+1)] = $i }
  n[cfg]++
  first = ("first_eviction_s" in row) ? sprintf("%.1f (%d MiB)", row["first_eviction_s"], row["swap_used_at_first_eviction_MiB"]) : "none"
  pending = sprintf("| %s | %d | %d | %d | %d | %s | %.1f | %s |", cfg, n[cfg], row["oom_kills"], row["kubelet_evictions"],
    row["agent_evictions"], first, row["full_stall_s"], row["high_priority_lost"] ? "yes" : "no")
}
/evicted: / && pending != "" {
  taken = $0; sub(/.*evicted: /, "", taken); sub(/; pods:.*/, "", taken)
  print pending " " taken " |"; pending = ""
}
END {
  for (c in n) printf "| %s: mean of %d | | %.1f | %.1f | %.1f | | %.1f | %d of %d |\n", c, n[c], v[c, "oom_kills"] / n[c],
    v[c, "kubelet_evictions"] / n[c], v[c, "agent_evictions"] / n[c], v[c, "full_stall_s"] / n[c], v[c, "high_priority_lost"], n[c]
}' "$out" | {
  echo "| configuration | run | kernel OOM kills | kubelet evictions | agent evictions | first eviction, s from the burst pod's start (swap in use then, of 2048 MiB) | node memory full stall, s | high-priority pod lost | pods taken |"
  echo "|---|---|---|---|---|---|---|---|---|"
  cat
}
exit $status
