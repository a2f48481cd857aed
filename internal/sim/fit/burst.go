package fit

// Reclaim's bursts while it keeps up. Workers paging together, each in
// its own cgroup, lose pages to reclaim second by second; were each
// visit of reclaim SWAP_CLUSTER_MAX pages to one cgroup, a worker's
// pages out over a span would vary around their expectation as a count
// of 32-page visits. Measured here (density ramps of 9-16 random workers
// over 256 MiB on 1 and 2 GiB nodes, 20 s a step) they vary as a count
// of 290-640-page visits over a second and 380-1060 over two: reclaim
// sweeps the cgroups unevenly, some for whole seconds not at all. The
// spread is what lets a VM with few pages out reach RAM speed by chance,
// so the model draws its visits in bursts of the measured size
// (Node.ReclaimBurstPages).

// BurstSample is one window of paging workers: each worker's pages out
// (pages reclaim took from it: its swap entries' growth plus what it
// faulted back) in each of the window's consecutive spans, OutPages[w][b].
type BurstSample struct {
	OutPages [][]float64
}

// reclaimBurstChi2 is the Pearson statistic of the window's pages out
// against the two-way expectation (a worker's share of the window times a
// bin's total: what the order cgroups were made in and each second's pace
// leave) and its degrees of freedom. A count of visits of B pages has a
// variance of B times its mean, so the statistic over its degrees of
// freedom is B. Workers that lost nothing (in RAM) are left out.
func reclaimBurstChi2(outPages [][]float64) (chi2, dof float64) {
	var rows [][]float64
	for _, r := range outPages {
		if sumOf(r) > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) < 2 {
		return 0, 0
	}
	bins := len(rows[0])
	for _, r := range rows {
		bins = min(bins, len(r))
	}
	if bins < 2 {
		return 0, 0
	}
	binTotals := make([]float64, bins)
	var total float64
	for _, r := range rows {
		for b := range bins {
			binTotals[b] += r[b]
			total += r[b]
		}
	}
	if !(total > 0) {
		return 0, 0
	}
	for _, r := range rows {
		rowTotal := sumOf(r[:bins])
		for b := range bins {
			if e := rowTotal * binTotals[b] / total; e > 0 {
				chi2 += (r[b] - e) * (r[b] - e) / e
			}
		}
	}
	return chi2, float64((len(rows) - 1) * (bins - 1))
}

// PooledReclaimBurst is the pages a visit of reclaim took in several
// windows pooled (their statistics over their degrees of freedom
// together), and the degrees of freedom behind it (0: nothing to tell,
// and the burst 0).
func PooledReclaimBurst(samples []BurstSample) (burstPages, dof float64) {
	var chi2 float64
	for _, s := range samples {
		c, d := reclaimBurstChi2(s.OutPages)
		chi2, dof = chi2+c, dof+d
	}
	if !(dof > 0) {
		return 0, 0
	}
	return chi2 / dof, dof
}

func sumOf(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum
}
