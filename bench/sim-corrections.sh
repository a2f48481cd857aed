#!/usr/bin/env bash
# Which of the simulator's fitted terms beat this machine's noise floor?
# For each case (a directory with machine.yaml, the figures --machine this
# measured before the ramps; measured.csv, each step's aggregate pages/s
# of two measured ramps of the same case: workers,run1,run2; and case,
# its scan, node, swap, deployments and the measured knees), it simulates
# the ramp with every term as measured, with each fitted term off in
# turn, and with all of them off, and holds each model against each
# measured ramp alone, as the two ramps are held against each other (the
# noise floor): the steps within 15% and the mean |ln(model/measured)|,
# in RAM (to the knee) and on the plateau (from its start). Its last
# lines are each term's verdict by docs/sim.md's rule: a term stays where,
# in one region on at least two days, the model without it matches fewer
# steps than the day's measured ramps match each other, and the term
# closes at least half of that gap. Before them, the model as measured
# against the noise floor, by day and over every day: its share of steps
# within 15% against the floor's, and a shortfall in standard errors (the
# validation table of docs/sim.md).
# Usage: bench/sim-corrections.sh CASE_DIR... (no root; seconds a case),
# or bench/sim-corrections.sh --cases-from RESULTS OUT_DIR to make case
# directories of a `REPEATS=2 RESULTS=dir bench/sim-fidelity.sh` run.
# CORRECTIONS lists the terms and the values that turn them off (the
# model has none now: default none, the model against the noise floor
# alone); REF=commit builds headroom from that commit instead, to judge
# terms since removed (docs/sim.md gives the command). ADD=1 holds the
# model with every term off but one ("TERM alone") instead of with every
# term but one.
# Given cases of several days, it also holds each case's measured ramps
# against the same case's on every other day (how far the machine moves
# between days). A scenario's keys the binary does not know are dropped.
# The cases docs/sim.md cites are in bench/results/sim-fidelity/.
source "$(dirname "$0")/lib.sh"
(($# > 0)) || { echo "usage: $0 CASE_DIR... | --cases-from RESULTS OUT_DIR" >&2; exit 2; }

if [ -n "${REF:-}" ]; then
  git worktree add -q --detach "$BENCH_TMP/ref" "$REF"
  cleanup_hooks+=("git worktree remove --force '$BENCH_TMP/ref'")
  (cd "$BENCH_TMP/ref" && CGO_ENABLED=0 go build -o "$HEADROOM" ./cmd/headroom)
fi

if [ "$1" = --cases-from ]; then
  (($# == 3)) || { echo "usage: $0 --cases-from RESULTS OUT_DIR" >&2; exit 2; }
  for sim in "$2"/sim-*; do
    name=${sim##*/sim-} scan=${name%%-*} node=${name#*-}
    m1="$2/measured-$name" m2="$2/measured-$name-r2"
    [ -f "$sim/machine.yaml" ] && [ -f "$m1/steps.csv" ] && [ -f "$m2/steps.csv" ] || continue
    c="$3/$(date -r "$sim/machine.yaml" +%F)-$name"
    # A day's case is measured once: another run that day goes elsewhere.
    [ ! -e "$c" ] || { echo "$c exists: give another OUT_DIR" >&2; exit 2; }
    mkdir -p "$c"
    cp "$sim/machine.yaml" "$c/"
    join -t, <(tail -n +2 "$m1/steps.csv" | cut -d, -f2,6 | sort -t, -k1,1) <(tail -n +2 "$m2/steps.csv" | cut -d, -f2,6 | sort -t, -k1,1) |
      sort -t, -k1,1n > "$c/measured.csv"
    knees=""
    for m in "$m1" "$m2"; do
      j=$("$HEADROOM" report "$m" -o "$BENCH_TMP/r.html" --json | tr -d ' \n')
      knees+="$(json_field "$j" knee_workers)/$(json_field "$j" plateau_start_workers) "
    done
    python3 - "$sim/run.json" "$scan" "$node" "${knees% }" > "$c/case" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["params"]
print('scan=%s node=%s swap=%dMi deployments=%s knees="%s"' % (sys.argv[2], sys.argv[3], p["swap_bytes"] >> 20, p["deployments"], sys.argv[4]))
PY
    echo "$c"
  done
  exit 0
fi

# Each fitted term and the value that turns it off.
read -ra corrections <<<"${CORRECTIONS:-}"
known=$("$HEADROOM" sim --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u | tr '\n' ' ')

# score CASE SIM_STEPS_CSV: "ram_hit ram_n plateau_hit plateau_n ram_err plateau_err" of the
# model (column 2 of steps.csv is workers, 6 the aggregate) against each run.
score() {
  local knee plateau
  read -r knee plateau < "$1/.knees"
  tail -n +2 "$2" | cut -d, -f2,6 | sort -t, -k1,1n | join -t, - <(sort -t, -k1,1n "$1/measured.csv") |
    awk -F, -v k="$knee" -v p="$plateau" '
      function add(m, r, region) { n[region]++; if (r > 0 && m > 0) { e[region] += (m > r ? log(m / r) : log(r / m)); if (m / r >= 0.85 && m / r <= 1.15) hit[region]++ } }
      { for (i = 3; i <= NF; i++) { if ($1 <= k) add($2, $i, "ram"); if ($1 >= p) add($2, $i, "plateau") } }
      END { printf "%d %d %d %d %.3f %.3f\n", hit["ram"], n["ram"], hit["plateau"], n["plateau"], e["ram"] / n["ram"], e["plateau"] / n["plateau"] }'
}

# noise CASE: the same figures of the two measured ramps against each other.
noise() {
  local knee plateau
  read -r knee plateau < "$1/.knees"
  awk -F, -v k="$knee" -v p="$plateau" '
    function add(a, b, region) { n[region]++; e[region] += (a > b ? log(a / b) : log(b / a)); if (a / b >= 0.85 && a / b <= 1.15) hit[region]++ }
    { if ($1 <= k) add($2, $3, "ram"); if ($1 >= p) add($2, $3, "plateau") }
    END { printf "%d %d %d %d %.3f %.3f\n", hit["ram"], n["ram"], hit["plateau"], n["plateau"], e["ram"] / n["ram"], e["plateau"] / n["plateau"] }' "$1/measured.csv"
}

declare -A total days
knees_exact=0 knees_total=0
tally() { # VARIANT FIGURES
  local a
  read -ra a <<<"$2"
  read -ra t <<<"${total[$1]:-0 0 0 0 0 0}"
  total[$1]="$((t[0] + a[0])) $((t[1] + a[1])) $((t[2] + a[2])) $((t[3] + a[3])) $(awk -v x="${t[4]}" -v y="${a[4]}" -v n="${a[1]}" 'BEGIN { print x + y * n }') $(awk -v x="${t[5]}" -v y="${a[5]}" -v n="${a[3]}" 'BEGIN { print x + y * n }')"
}

printf '%-34s %-28s %9s %9s %9s %9s\n' case model "in RAM" plateau "RAM err" "plat err"
for c in "$@"; do
  c=${c%/}
  [ -f "$c/case" ] || continue # the folder's notes and run logs
  # shellcheck disable=SC1091
  source "$c/case" # scan node swap deployments knees ("K/P K/P")
  awk -v ks="$knees" 'BEGIN { n = split(ks, r, " "); k = 1e9; p = 0; for (i = 1; i <= n; i++) { split(r[i], kp, "/"); if (kp[1] < k) k = kp[1]; if (kp[2] > p) p = kp[2] } print k, p }' > "$c/.knees"
  # The scenario's keys this binary has.
  while IFS= read -r line; do
    key=${line%%:*}
    [[ $line == \#* || " $known " == *" --$key "* ]] && echo "$line"
  done < "$c/machine.yaml" > "$BENCH_TMP/machine.yaml"
  common=(--scenario "$BENCH_TMP/machine.yaml" --node-memory "$node" --swap "$swap" --vm-memory 320Mi --memory-size 256Mi --overcommit-percent 400
    --deployments "$deployments" --workload-runtime 8s --memory-scan "$scan" --stop-on-failure=false
    --worker-kind process --system-reserve 0 --guest-overhead 0 --overhead 3Mi)
  f=$(noise "$c")
  day=$(basename "$c") day=${day:0:10}
  days[$day]=1
  tally "noise floor" "$f"
  tally "$day|noise floor" "$f"
  printf '%-34s %-28s %s\n' "$(basename "$c")" "noise floor (run vs run)" "$f"
  variants=("as measured")
  ((${#corrections[@]} > 0)) && variants+=("all fitted off" "${corrections[@]}")
  for v in "${variants[@]}"; do
    off=()
    case $v in
      "as measured") ;;
      "all fitted off") for x in "${corrections[@]}"; do off+=(--"${x%%=*}" "${x#*=}"); done ;;
      *)
        if [ -n "${ADD:-}" ]; then # every term off but this one
          for x in "${corrections[@]}"; do [ "$x" = "$v" ] || off+=(--"${x%%=*}" "${x#*=}"); done
        else
          off=(--"${v%%=*}" "${v#*=}")
        fi
        ;;
    esac
    out="$BENCH_TMP/sim"
    rm -rf "$out"
    "$HEADROOM" sim "${common[@]}" "${off[@]}" --out "$out" > "$BENCH_TMP/sim.log" 2>&1 || { tail -2 "$BENCH_TMP/sim.log"; exit 1; }
    f=$(score "$c" "$out/steps.csv")
    if [ "$v" = "as measured" ]; then
      j=$("$HEADROOM" report "$out" -o "$BENCH_TMP/r.html" --json | tr -d ' \n')
      k=$(json_field "$j" knee_workers)
      knees_total=$((knees_total + 1))
      [[ " $knees " == *" $k/"* ]] && knees_exact=$((knees_exact + 1))
      printf '%-34s %-28s knee %s (measured %s)\n' "" "" "$k" "$knees"
    fi
    name=$v
    [[ $v == *=* ]] && name="${v%%=*} $( [ -n "${ADD:-}" ] && echo alone || echo off)"
    tally "$name" "$f"
    tally "$day|$name" "$f"
    printf '%-34s %-28s %s\n' "" "$name" "$f"
  done
  rm -f "$c/.knees"
done
echo
echo "knees: the model's equal to a measured ramp's in $knees_exact of $knees_total cases"
echo "totals: steps within 15% (in RAM, plateau) and mean |ln ratio| (in RAM, plateau)"
totals=("noise floor" "as measured")
((${#corrections[@]} > 0)) && totals+=("all fitted off" "${corrections[@]}")
for v in "${totals[@]}"; do
  name=$v
  [[ $v == *=* ]] && name="${v%%=*} $( [ -n "${ADD:-}" ] && echo alone || echo off)"
  read -ra t <<<"${total[$name]}"
  awk -v name="$name" -v a="${t[0]}" -v b="${t[1]}" -v c="${t[2]}" -v d="${t[3]}" -v e="${t[4]}" -v f="${t[5]}" \
    'BEGIN { printf "%-34s in RAM %3d of %3d, plateau %3d of %3d; error in RAM %.3f, plateau %.3f\n", name, a, b, c, d, e / b, f / d }'
done

# verdict TERM: docs/sim.md's rule, from the day's totals. Without the
# term is the model with every term off (ADD=1: "TERM alone" against it)
# or with every term but it (against "as measured"). A day and region
# qualify where the model without the term matches a smaller share of
# steps than the ramps match each other, and the term gains at least half
# of that shortfall; the term stays where one region qualifies on two or
# more days.
verdict() {
  local term=$1 with without day region kept=removed list=() line
  if [ -n "${ADD:-}" ]; then with="$term alone" without="all fitted off"; else with="as measured" without="$term off"; fi
  for region in 0 2; do
    local qualified=()
    for day in $(printf '%s\n' "${!days[@]}" | sort); do
      awk -v f="${total[$day|noise floor]}" -v o="${total[$day|$without]}" -v w="${total[$day|$with]}" -v r="$region" 'BEGIN {
          split(f, a, " "); split(o, b, " "); split(w, c, " ")
          i = r + 1; j = r + 2
          if (a[j] == 0 || b[j] == 0 || c[j] == 0) exit 1
          floor = a[i] / a[j]; off = b[i] / b[j]; on = c[i] / c[j]
          exit !(off < floor && on - off >= (floor - off) / 2)
        }' && qualified+=("$day")
    done
    line="$( ((region == 0)) && echo "in RAM" || echo plateau): ${qualified[*]:-none}"
    list+=("$line")
    ((${#qualified[@]} >= 2)) && kept=kept
  done
  printf '%-34s %-7s (%s; %s)\n' "$term" "$kept" "${list[0]}" "${list[1]}"
}

# against_floor LABEL FLOOR MODEL: the model's share of steps within 15%
# (as measured) against the noise floor's, in RAM and on the plateau. A
# shortfall is given in standard errors of the difference of the two
# shares (binomial): under 2, these counts cannot tell the model from the
# floor (steps of one ramp move together, so the true error is wider
# still). docs/sim.md's validation table holds these lines.
against_floor() {
  awk -v label="$1" -v f="$2" -v m="$3" 'BEGIN {
      split(f, a, " "); split(m, b, " ")
      out = label ":"
      for (r = 1; r <= 3; r += 2) {
        region = r == 1 ? "in RAM" : "plateau"
        if (a[r + 1] == 0 || b[r + 1] == 0) continue
        p = a[r] / a[r + 1]; q = b[r] / b[r + 1]
        se = sqrt(p * (1 - p) / a[r + 1] + q * (1 - q) / b[r + 1])
        if (q >= p) verdict = "at or above the floor"
        else {
          z = se > 0 ? (p - q) / se : 99
          verdict = sprintf("%.0f points short, %.1f standard errors: %s", 100 * (p - q), z, z < 2 ? "within the noise" : "misses")
        }
        out = out sprintf(" %s %d of %d (%.0f%%) against %d of %d (%.0f%%), %s;", region, b[r], b[r + 1], 100 * q, a[r], a[r + 1], 100 * p, verdict)
      }
      sub(/;$/, "", out); print out
    }'
}
if ((${#days[@]} > 0)); then
  echo
  echo "the model (as measured) against the noise floor: steps within 15%, the model's against the floor's"
  for day in $(printf '%s\n' "${!days[@]}" | sort); do
    against_floor "$day" "${total[$day|noise floor]}" "${total[$day|as measured]}"
  done
  ((${#days[@]} > 1)) && against_floor "every day" "${total[noise floor]}" "${total[as measured]}"
fi

if ((${#corrections[@]} > 0)) && ((${#days[@]} > 0)); then
  echo
  echo "verdict: a term stays where, in RAM or on the plateau on at least two days, the model without it matches fewer steps than the ramps match each other and the term gains at least half of that (the days where it does)"
  for x in "${corrections[@]}"; do verdict "${x%%=*}"; done
fi

# The same case on days apart: each measured ramp of one day against each
# of another's, the regions from all four ramps' knees. How far the
# machine itself moves between days, beside the noise floor of minutes.
python3 - "$@" <<'PY'
import csv, itertools, os, re, sys
cases = {}
for d in sys.argv[1:]:
    d = d.rstrip("/")
    if not os.path.isfile(d + "/case"):
        continue
    case = open(d + "/case").read()
    key = tuple(re.search(k + r'=(\S+)', case).group(1) for k in ("scan", "node", "deployments"))
    knees = [tuple(map(int, k.split("/"))) for k in re.search(r'knees="([^"]*)"', case).group(1).split()]
    rows = {int(r[0]): [float(x) for x in r[1:]] for r in csv.reader(open(d + "/measured.csv"))}
    cases.setdefault(os.path.basename(d)[:10], {})[key] = (rows, knees)
days = sorted(cases)
if len(days) > 1:
    print("\nthe same case on days apart (each ramp against each): steps within 15%, in RAM and on the plateau")
for a, b in itertools.combinations(days, 2):
    hit, n = {"ram": 0, "plateau": 0}, {"ram": 0, "plateau": 0}
    for key in sorted(set(cases[a]) & set(cases[b])):
        (ra, ka), (rb, kb) = cases[a][key], cases[b][key]
        knee, plateau = min(k for k, _ in ka + kb), max(p for _, p in ka + kb)
        for w in set(ra) & set(rb):
            for x, y in itertools.product(ra[w], rb[w]):
                for region, inside in (("ram", w <= knee), ("plateau", w >= plateau)):
                    if inside and x > 0 and y > 0:
                        n[region] += 1
                        hit[region] += 0.85 <= x / y <= 1.15
    print("%s against %s: in RAM %d of %d, plateau %d of %d" % (a, b, hit["ram"], n["ram"], hit["plateau"], n["plateau"]))
PY
