#!/usr/bin/env bash
# Balloon and free page reporting, measured by the microvm system tests:
# how long until a balloon target shows in the guest's MemAvailable (target
# <= 1 s) and until memory the guest frees leaves QEMU's resident set
# (target <= 3 s). Needs root.
source "$(dirname "$0")/lib.sh"
CGO_ENABLED=0 go test -tags system -count 1 -v \
  -run '^(TestSystemBalloonSeenInsideGuest|TestSystemFreedGuestMemoryReturnsToHost|TestSystemVMInItsCgroup)$' ./internal/microvm \
  | grep -E 'MemAvailable|resident on the host|QEMU RSS|^(ok|FAIL)'
