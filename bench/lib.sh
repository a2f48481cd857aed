# Shared helpers for the bench scripts (sourced).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_TMP=$(mktemp -d)
cleanup_hooks=()
bench_cleanup() {
  local i
  for ((i=${#cleanup_hooks[@]}-1; i>=0; i--)); do eval "${cleanup_hooks[$i]}" || true; done
  rm -rf "$BENCH_TMP"
}
trap bench_cleanup EXIT
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$BENCH_TMP/headroom" ./cmd/headroom
HEADROOM="$BENCH_TMP/headroom"

# json_field LINE NAME: the first numeric value of "NAME" in a JSON line.
json_field() { grep -o "\"$2\":[-0-9.e+]*" <<<"$1" | head -n 1 | cut -d: -f2; }
