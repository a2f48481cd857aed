#!/usr/bin/env bash
# Compressed swap tiers against disk swap, the seed-001 question asked with
# today's tools. For pages that compress 2:1 and 4:1 and for random pages,
# one density ramp each (a 1 GiB node, 2 GiB swap file, workers of 256 MiB,
# random access, 3, 5 and 7 workers) with
#   disk       the swap file only
#   zram       a 1 GiB zram device in front of it (lzo-rle)
#   zswap      zswap (20% pool) in front of it
#   disk+ram   the swap file only, the node given the RAM the larger of
#              zram's and zswap's pools took (they live outside the node's
#              cgroup, so the tiers' runs had that much RAM more)
# Per step: aggregate pages/s and its ratio to disk, swap-ins/s; per run:
# the most RAM the tier took and the machine's CPU-seconds. Then the seed's
# own setup: a guest swapping to its own disk backed by host tmpfs vs a
# host file (one 256 MiB VM, 384 MiB random). Needs root; removes all it
# made. RESULTS=dir keeps the density results (for `headroom report`).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "swap-tiers.sh needs root" >&2; exit 2; }
OUT=${RESULTS:-$BENCH_TMP/results}
mkdir -p "$OUT"
DEPLOY=${DEPLOYMENTS:-3,5,7}
cpu_seconds() { awk '/^cpu /{printf "%.1f", ($2+$3+$4+$7+$8)/100}' /proc/stat; }

# run NAME CONTENT NODE TIER: one density ramp; prints its CSV rows as
# "name content workers pages_per_sec swapin_per_sec", then "ram MiB cpu s".
run() {
  local name=$1 content=$2 node=$3 tier=$4 dir="$OUT/$2-$1" cpu0 peak=0 sampler
  local tierflag=()
  [ -n "$tier" ] && tierflag=(--swap-tier "$tier")
  # The tier's RAM, sampled every 0.5 s.
  ( while :; do "$HEADROOM" swap status --json 2>/dev/null | grep -o '"ram_bytes": [0-9]*' | tail -1 | grep -o '[0-9]*$'; sleep 0.5; done ) \
    > "$BENCH_TMP/ram-$name-$content" &
  sampler=$!
  cpu0=$(cpu_seconds)
  "$HEADROOM" density --node-memory "$node" --swap 2Gi "${tierflag[@]}" --vm-memory 320Mi --memory-size 256Mi \
    --overcommit-percent 400 --deployments "$DEPLOY" --workload-runtime 6s --memory-scan random --content "$content" \
    --stop-on-failure=false --label "$name $content" --out "$dir" > "$BENCH_TMP/$name-$content.log" 2>&1 || true
  kill $sampler; wait $sampler 2>/dev/null || true
  peak=$(sort -n "$BENCH_TMP/ram-$name-$content" | tail -1)
  echo "cost $name $content $(( ${peak:-0} >> 20 )) $(echo "$(cpu_seconds) - $cpu0" | bc)"
  tail -n +2 "$dir/steps.csv" | awk -F, -v n="$name" -v c="$content" '{printf "step %s %s %s %s %s %s\n", n, c, $2, $6, $8, ($4=="true"?"failed":"")}'
}

for content in compress=2 compress=4 random; do
  for setup in disk zram zswap; do
    case $setup in
      disk) run disk $content 1Gi "" ;;
      zram) run zram $content 1Gi zram:1Gi ;;
      zswap) run zswap $content 1Gi zswap:max_pool_percent=20 ;;
    esac
  done > "$BENCH_TMP/rows-$content"
  pool=$(awk '$1=="cost" && ($2=="zram" || $2=="zswap") {if ($4>m) m=$4} END{print m+0}' "$BENCH_TMP/rows-$content")
  run disk+ram $content $(( 1024 + pool ))Mi "" >> "$BENCH_TMP/rows-$content"
done

printf '%-11s %-9s %7s %14s %7s %12s\n' content setup workers pages/s vs_disk swapins/s
for content in compress=2 compress=4 random; do
  awk -v c="$content" '
    $1=="step" && $2=="disk" {base[$4]=$5}
    $1=="step" {rows[++n]=$0}
    END {for (i=1;i<=n;i++) {split(rows[i],f," "); r=(base[f[4]]>0)?f[5]/base[f[4]]:0;
         printf "%-11s %-9s %7s %14.0f %7.2f %12.0f %s\n", c, f[2], f[4], f[5], r, f[6], f[7]}}' "$BENCH_TMP/rows-$content"
done
echo
printf '%-11s %-9s %12s %8s\n' content setup tier_RAM_MiB cpu_s
for content in compress=2 compress=4 random; do
  awk '$1=="cost" {printf "%-11s %-9s %12s %8s\n", $3, $2, $4, $5}' "$BENCH_TMP/rows-$content"
done

# The seed's setup: the guest swaps to its own disk; the host backs that
# disk with tmpfs (RAM) or a file.
echo
for backing in tmpfs file; do
  line=$("$HEADROOM" vm run --memory 256Mi --guest-swap 512Mi,backing=$backing -- load --size 384Mi --scan random \
    --duration 10s 2>/dev/null | grep '^summary' || true)
  echo "guest swap on host $backing: ${line:-failed}"
done
echo "results: $OUT"
