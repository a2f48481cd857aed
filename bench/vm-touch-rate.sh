#!/usr/bin/env bash
# Touch rate inside a micro-VM guest against headroom load on the host, in
# the same run: 256 MiB, writes=1, 5 s, seq and random. On TCG the guest is
# far slower (every guest memory access goes through QEMU's software MMU);
# with KVM the ratio must be >= 0.9. Needs root (the guest image cache).
source "$(dirname "$0")/lib.sh"
"$HEADROOM" vm image >/dev/null
printf '%-7s %14s %14s %8s\n' scan host_pages/s guest_pages/s ratio
for scan in seq random; do
  host=$("$HEADROOM" load --size 256Mi --scan "$scan" --duration 5s --json | grep '"type":"summary"')
  guest=$("$HEADROOM" vm run --memory 384Mi -- load --size 256Mi --scan "$scan" --duration 5s --json | grep '"type":"summary"')
  h=$(json_field "$host" pages_per_sec); g=$(json_field "$guest" pages_per_sec)
  printf '%-7s %14.0f %14.0f %8.3f\n' "$scan" "$h" "$g" "$(awk -v g="$g" -v h="$h" 'BEGIN{print g/h}')"
done
