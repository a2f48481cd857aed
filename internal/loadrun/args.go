package loadrun

import (
	"strconv"

	"github.com/headroom-dev/headroom/internal/memload"
)

// Args renders p as `headroom load` flags, so a worker process started by a
// harness runs exactly these parameters. cmd/headroom parses the same flags
// (its tests check the round trip).
func Args(p memload.Params) []string {
	args := []string{
		"--size", strconv.FormatUint(p.SizeBytes, 10),
		"--scan", string(p.Scan),
		"--stride", strconv.FormatUint(p.StrideBytes, 10),
		"--writes", strconv.FormatFloat(p.WriteFraction, 'g', -1, 64),
		"--rate", strconv.FormatFloat(p.RatePagesPerSec, 'f', -1, 64),
		"--duration", p.Duration.String(),
		"--iterations", strconv.FormatUint(p.Iterations, 10),
		"--content", p.Content.String(),
		"--seed", strconv.FormatUint(p.Seed, 10),
		"--hugepages", string(p.HugePages),
		"--interval", p.Interval.String(),
	}
	if p.Mergeable {
		args = append(args, "--mergeable")
	}
	if p.Checksum {
		args = append(args, "--checksum")
	}
	if p.Pace > 0 {
		args = append(args, "--pace", p.Pace.String())
	}
	return args
}
