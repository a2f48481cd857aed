#!/usr/bin/env bash
# Under swap the workload must be bound by paging, not by itself: a 1 GiB
# block in a 512 MiB memory cgroup (v1) with a 2 GiB swap file. Prints
# pages/s, major faults/s and the workload's own (user) CPU share, beside
# the same scan fully resident as the reference. Needs root; restores swap
# and cgroups on exit.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "swap-bound.sh needs root" >&2; exit 2; }
seconds=${SECONDS_PER_RUN:-15}
swapfile=/var/tmp/headroom-bench-swap
cg=/sys/fs/cgroup/memory/headroom-bench-$$
cleanup_hooks+=("swapoff $swapfile 2>/dev/null; rm -f $swapfile")
cleanup_hooks+=("for p in \$(cat $cg/cgroup.procs 2>/dev/null); do kill -9 \$p; done; rmdir $cg 2>/dev/null")
fallocate -l 2G "$swapfile" && chmod 600 "$swapfile" && mkswap -q "$swapfile" && swapon "$swapfile"
mkdir "$cg" && echo $((512 << 20)) > "$cg/memory.limit_in_bytes"
printf '%-8s %-9s %12s %12s %10s\n' scan where pages/s majflt/s user_cpu
for scan in seq random; do
  ref=$("$HEADROOM" load --size 1Gi --scan "$scan" --duration 3s --json | tail -n 1)
  printf '%-8s %-9s %12.0f %12s %9.1f%%\n' "$scan" resident "$(json_field "$ref" pages_per_sec)" 0 \
    "$(awk -v u="$(json_field "$ref" user_cpu_seconds)" -v s="$(json_field "$ref" seconds)" 'BEGIN{print 100*u/s}')"
  line=$(sh -c "echo \$\$ > $cg/cgroup.procs && exec $HEADROOM load --size 1Gi --scan $scan --duration ${seconds}s --json" | tail -n 1)
  printf '%-8s %-9s %12.0f %12.0f %9.1f%%\n' "$scan" swapping "$(json_field "$line" pages_per_sec)" \
    "$(json_field "$line" major_faults_per_sec)" \
    "$(awk -v u="$(json_field "$line" user_cpu_seconds)" -v s="$(json_field "$line" seconds)" 'BEGIN{print 100*u/s}')"
done
