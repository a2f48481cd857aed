// Package memload is the memory workload engine behind `headroom load`: it
// maps an anonymous block, fills it with a chosen page content (unique,
// zero, deduplicable or compressible), then touches it sequentially or at
// random, optionally rate-limited, and reports touches, faults, RSS and swap
// per interval.
package memload
