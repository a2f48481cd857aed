package agent

import (
	"os"
	"strconv"
	"time"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/policy"
)

// mergeableEvery is how often the scope's mergeable memory is summed (it
// reads every process's smaps).
const mergeableEvery = 5 * time.Second

// ksmObserver reads ksmd's state, its CPU time and the memory the scope
// offers for merging.
type ksmObserver struct {
	ksmDir      string
	ksmd        host.KsmdCPU
	mergeable   uint64
	mergeableAt time.Time
}

// sample fills s.KSM (cowKSM comes from the vmstat read of the same sample).
func (k *ksmObserver) sample(s *policy.Sample, now time.Time, cowKSM uint64, scope cgroup.Group, hostScope bool, roots host.Roots) error {
	raw, err := host.ReadKSMDir(k.ksmDir)
	if err != nil {
		return err
	}
	cpu, err := k.ksmd.Seconds()
	if err != nil {
		return err
	}
	if now.Sub(k.mergeableAt) >= mergeableEvery {
		k.mergeable, k.mergeableAt = scopeMergeable(scope, hostScope, roots), now
	}
	s.KSM = &policy.KSMSample{Run: raw.Run, PagesToScan: raw.PagesToScan, SleepMillisecs: raw.SleepMillisecs,
		AdvisorMode: raw.AdvisorMode, PagesScanned: raw.PagesScanned, FullScans: raw.FullScans, KsmdCPUSeconds: cpu,
		CowKSM: cowKSM, PagesShared: raw.PagesShared, PagesSharing: raw.PagesSharing, PagesVolatile: raw.PagesVolatile,
		GeneralProfitBytes: raw.GeneralProfitBytes, MergeableBytes: k.mergeable}
	return nil
}

// scopeMergeable sums the mergeable memory of the scope's processes (every
// process for the host scope). Processes that exit meanwhile are skipped.
func scopeMergeable(scope cgroup.Group, hostScope bool, roots host.Roots) uint64 {
	var pids []int
	if hostScope {
		entries, _ := os.ReadDir(roots.Proc)
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	} else {
		pids, _ = cgroup.TreeProcs(scope)
	}
	var total uint64
	for _, pid := range pids {
		if n, err := roots.MergeableBytes(pid); err == nil {
			total += n
		}
	}
	return total
}
