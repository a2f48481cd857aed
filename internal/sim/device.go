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

// maxMixedCapacity bounds Device.MixedCapacity: mixing lets a device
// overlap its reads and writes, not serve a hundred times its rates.
const maxMixedCapacity = 100

// MixedCapacityForm describes the accepted mixed-capacity syntax.
const MixedCapacityForm = "TIMES or TASKS:TIMES[,...] (e.g. 1.4, or 2:1,8:1.4,16:1.6: how many times the sum of reads' and writes' shares of the device's rates it serves with that many tasks faulting at once; 0: none)"

// TaskCapacity is how many times the sum of its reads' and writes' shares
// of its rates the device serves while Tasks tasks fault at once. Under
// swap this machine's virtio disk served more the more faulted: random
// workers over a swap file paged 37-39k pages in a second with two,
// 50-52k with eight and 57-60k with sixteen, against a direct 4 KiB read
// rate of 64-70k at depths 16-64.
type TaskCapacity struct {
	Tasks    float64 `json:"tasks"`
	Capacity float64 `json:"capacity"`
}

// ParseMixedCapacity parses a device's mixed capacity (MixedCapacityForm):
// one figure whatever the tasks, or figures by task count, ascending; "0"
// is none.
func ParseMixedCapacity(s string) ([]TaskCapacity, error) {
	if strings.TrimSpace(s) == "0" {
		return nil, nil
	}
	times := func(v string) (float64, bool) {
		c, err := strconv.ParseFloat(v, 64)
		return c, err == nil && c >= 1 && c <= maxMixedCapacity
	}
	out, ok := parseByTasks(s, times, func(tasks, v float64) TaskCapacity { return TaskCapacity{Tasks: tasks, Capacity: v} })
	if !ok {
		return nil, fmt.Errorf("%q: want %s, task counts ascending from 1, each 1 to %g", s, MixedCapacityForm, float64(maxMixedCapacity))
	}
	return out, nil
}

// FormatMixedCapacity is ParseMixedCapacity's inverse, to a hundredth.
func FormatMixedCapacity(cs []TaskCapacity) string {
	return formatByTasks(cs, func(c TaskCapacity) (float64, float64) { return c.Tasks, c.Capacity })
}

// capacityAt is the mixed capacity cs with tasks faulting at once: linear
// in log2 of the task count between the given counts, the nearest count's
// beyond them, never below 1 (1 when none are given).
func capacityAt(cs []TaskCapacity, tasks float64) float64 {
	if len(cs) == 0 {
		return 1
	}
	return max(alongLog2(cs, max(tasks, 1), func(c TaskCapacity) float64 { return c.Tasks },
		func(c TaskCapacity) float64 { return c.Capacity }, false), 1)
}

// mixedCapacityValid: task counts ascending from 1, each capacity 1 to
// maxMixedCapacity (none is valid).
func mixedCapacityValid(cs []TaskCapacity) bool {
	last := 0.0
	for _, c := range cs {
		if !(c.Tasks >= 1) || math.IsInf(c.Tasks, 0) || !(c.Capacity >= 1 && c.Capacity <= maxMixedCapacity) || !(c.Tasks > last) {
			return false
		}
		last = c.Tasks
	}
	return true
}
