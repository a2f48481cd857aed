#!/usr/bin/env bash
# Micro-VM start-up and cost under the qemu density backend: one VM alone,
# then four started at once on this machine's cores. Prints each start-up
# phase (p50/p95 over the VMs, seconds from creation), QEMU's CPU time until
# the guest command runs, the host overhead per VM (QEMU's anonymous memory
# beyond the guest RAM it backs) and the creation rate. Targets on TCG here:
# <= 1.5 CPU-s to the command, creation-to-ready p95 <= 6 s with 4 at once,
# overhead <= 40 MiB. Needs root; removes what it creates.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "vm-boot.sh needs root" >&2; exit 2; }
"$HEADROOM" vm image >/dev/null
# The first boot from a freshly written image costs 0.3 CPU-s more: measure
# steady state, as on a host that has booted this image before.
"$HEADROOM" vm run --memory 256Mi -- /bin/true
"$HEADROOM" density --backend qemu --deployments 1,4 --vm-memory 384Mi --memory-size 256Mi --workload-runtime 3s \
  --memory-scan random --out "$BENCH_TMP/run" >/dev/null
python3 - "$BENCH_TMP/run/run.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
for s in run["steps"]:
    vms = s["per_worker"]
    accel = vms[0]["vm"]["accelerator"]
    print(f"{s['workers']} VM(s) started at once ({accel}), {s['creation_rate_per_minute']:.1f} VMs/min:")
    for p in s["create_phases"]:
        print(f"  {p['phase']:<16} p50 {p['p50_seconds']:6.2f} s   p95 {p['p95_seconds']:6.2f} s")
    cpu = sorted(w["vm"]["boot_cpu_seconds"] for w in vms)
    ovh = sorted(w["vm"]["host"]["overhead_bytes"] / 2**20 for w in vms if w["vm"].get("host"))
    pop = sorted(w["populate_seconds"] for w in vms)
    print(f"  QEMU CPU to the command: {', '.join(f'{c:.2f}' for c in cpu)} CPU-s (target <= 1.5)")
    print(f"  workload populate (256 MiB, apart): {', '.join(f'{c:.2f}' for c in pop)} s")
    print(f"  host overhead: {', '.join(f'{o:.0f}' for o in ovh)} MiB per VM (target <= 40)")
PY
