package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DepthsForm describes the accepted --swap-depths syntax.
const DepthsForm = "DEPTH:READ_IOPS/WRITE_IOPS[,...] (e.g. 1:6500/3700,4:28000/22000,16:45000/29000)"

// ParseDepths parses a device's rates by queue depth (DepthsForm).
func ParseDepths(s string) ([]DepthRate, error) {
	bad := fmt.Errorf("%q: want %s, depths ascending, rates positive", s, DepthsForm)
	var out []DepthRate
	for _, part := range strings.Split(s, ",") {
		depth, rates, ok := strings.Cut(strings.TrimSpace(part), ":")
		read, write, ok2 := strings.Cut(rates, "/")
		if !ok || !ok2 {
			return nil, bad
		}
		var d DepthRate
		var err [3]error
		d.QueueDepth, err[0] = strconv.ParseFloat(depth, 64)
		d.ReadIOPS, err[1] = strconv.ParseFloat(read, 64)
		d.WriteIOPS, err[2] = strconv.ParseFloat(write, 64)
		if err[0] != nil || err[1] != nil || err[2] != nil {
			return nil, bad
		}
		out = append(out, d)
	}
	if !depthsAscending(out) {
		return nil, bad
	}
	return out, nil
}

// FormatDepths is ParseDepths' inverse (exact: every figure in its
// shortest form that parses back to it).
func FormatDepths(ds []DepthRate) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%g:%g/%g", d.QueueDepth, d.ReadIOPS, d.WriteIOPS)
	}
	return strings.Join(parts, ",")
}

func depthsAscending(ds []DepthRate) bool {
	for i, d := range ds {
		if !(d.QueueDepth >= 1) || !(d.ReadIOPS > 0) || !(d.WriteIOPS > 0) || math.IsInf(d.QueueDepth+d.ReadIOPS+d.WriteIOPS, 0) ||
			(i > 0 && !(d.QueueDepth > ds[i-1].QueueDepth)) {
			return false
		}
	}
	return true
}

// readIOPSAt is the device's read rate with q reads outstanding:
// interpolated in log2 of the depth between measured depths, the nearest
// measured rate beyond them.
func (d Device) ReadIOPSAt(q float64) float64 {
	if len(d.Depths) == 0 {
		return d.ReadIOPS
	}
	return alongLog2(d.Depths, q, func(r DepthRate) float64 { return r.QueueDepth }, func(r DepthRate) float64 { return r.ReadIOPS }, false)
}

// transferSeconds is the device time an I/O of pages spends moving its
// bytes beyond its first page at bytesPerSec (0: none).
func transferSeconds(pages, bytesPerSec float64) float64 {
	if bytesPerSec <= 0 || pages <= 1 {
		return 0
	}
	return (pages - 1) * PageBytes / bytesPerSec
}

// readSeconds and writeSeconds are the device time one read or write of
// pages takes at a 4 KiB rate of iops: that rate's time plus the further
// pages' transfer.
func (d Device) ReadSeconds(iops, pages float64) float64 {
	return 1/iops + transferSeconds(pages, d.ReadBytesPerSec)
}

func (d Device) WriteSeconds(iops, pages float64) float64 {
	return 1/iops + transferSeconds(pages, d.WriteBytesPerSec)
}

// writeIOPS is the device's rate for reclaim's writes, which queue deep.
func (d Device) WriteIOPSAt() float64 {
	if len(d.Depths) == 0 {
		return d.WriteIOPS
	}
	return d.Depths[len(d.Depths)-1].WriteIOPS
}
