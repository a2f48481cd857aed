#!/usr/bin/env bash
# Touch rate inside a micro-VM guest against headroom load on the host, in
# the same run: 256 MiB, writes=1, 5 s, seq and random, each as one worker
# under a local controller (--workers 1: the code path density's workers
# run). On TCG the guest is far slower (every guest memory access goes
# through QEMU's software MMU); with KVM the ratio must be >= 0.9. Needs
# root (the guest image cache).
source "$(dirname "$0")/lib.sh"
"$HEADROOM" vm image >/dev/null
rate() { grep -o 'aggregate: 1 workers (0 failed), [0-9.]*[kMG]* pages/s' | grep -o '[0-9.]*[kMG]* pages' | cut -d' ' -f1; }
num() { awk -v v="$1" 'BEGIN{m=1; if (v ~ /k$/) m=1e3; if (v ~ /M$/) m=1e6; if (v ~ /G$/) m=1e9; sub(/[kMG]$/, "", v); printf "%.0f", v*m}'; }
printf '%-7s %14s %14s %8s\n' scan host_pages/s guest_pages/s ratio
for scan in seq random; do
  h=$(num "$("$HEADROOM" load --size 256Mi --scan "$scan" --duration 5s --workers 1 | rate)")
  g=$(num "$("$HEADROOM" vm run --memory 384Mi -- load --size 256Mi --scan "$scan" --duration 5s --workers 1 | rate)")
  printf '%-7s %14.0f %14.0f %8.3f\n' "$scan" "$h" "$g" "$(awk -v g="$g" -v h="$h" 'BEGIN{print g/h}')"
done
