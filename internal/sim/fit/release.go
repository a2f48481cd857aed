package fit

// ReleaseSample is one release run: the pages each worker had out and in
// RAM once all had filled their blocks, and the pace reclaim swapped the
// fill's pages out at (FillOutPagesPerSec, 0: not told).
type ReleaseSample struct {
	PagesOut, PagesInRAM []float64
	FillOutPagesPerSec   float64
}

// ReleaseFit is what release runs tell of reclaim where it falls behind:
// how much more readily it takes from the cgroups created first
// (OrderSlope, Node.ReclaimOrderSlope) and its batch a visit, in pages
// and as a share of a worker's pages in RAM (Node.ReclaimBatchShare, at
// most 1).
type ReleaseFit struct {
	OrderSlope, BatchPages, BatchShare float64
}

// maxOrderSlope bounds the fitted slope below 1, where the last cgroup
// would give nothing.
const maxOrderSlope = 0.95

// PooledRelease fits several runs (each of at least two workers, in the
// order their cgroups were made) together. Each worker's expected pages
// out are its run's mean times 1 + slope × its place (1 for the first,
// −1 for the last, evenly between), the slope fitted by least squares
// over all runs (at least 0: none measured is none). The batch is the
// spread left: the squared deviations from that expectation over the
// expectation's sum, less what the run's mean and a fitted slope took (a
// multinomial's variance is its batch times its mean, over workers − 1).
// Eight workers give a variance to about ±50%: pooling weighs every
// worker alike.
func PooledRelease(samples []ReleaseSample) ReleaseFit {
	var fit ReleaseFit
	var runs []ReleaseSample
	var means []float64
	for _, s := range samples {
		if len(s.PagesOut) >= 2 {
			runs, means = append(runs, s), append(means, meanOf(s.PagesOut))
		}
	}
	var across, along float64 // the slope's regression sums
	for r, s := range runs {
		for i, p := range s.PagesOut {
			place := creationPlace(i, len(s.PagesOut))
			across += (p - means[r]) * place
			along += means[r] * place * place
		}
	}
	if !(along > 0) {
		return fit
	}
	fit.OrderSlope = min(max(across/along, 0), maxOrderSlope)
	fitted := fit.OrderSlope == across/along // not held to its bounds
	var squares, dof, expected, workers, inRAM, inRAMWorkers float64
	for r, s := range runs {
		n := float64(len(s.PagesOut))
		// A multinomial's variance over its expected shares g (here 1 +
		// slope × place, summing to n) is the batch times mean × (n −
		// Σg²/n), and Σg²/n is 1 + spread.
		var spread float64
		for i, p := range s.PagesOut {
			place := fit.OrderSlope * creationPlace(i, len(s.PagesOut))
			squares += (p - means[r]*(1+place)) * (p - means[r]*(1+place))
			spread += place * place / n
		}
		dof += means[r] * (n - 1 - spread)
		expected += means[r] * n
		workers += n
		for _, p := range s.PagesInRAM {
			inRAM += p
			inRAMWorkers++
		}
	}
	// A fitted slope takes one degree of freedom, at the mean run's mean.
	if fitted {
		dof -= expected / workers
	}
	if !(dof > 0) {
		return fit
	}
	fit.BatchPages = squares / dof
	if inRAM > 0 {
		fit.BatchShare = min(fit.BatchPages/(inRAM/inRAMWorkers), 1)
	}
	return fit
}

func meanOf(xs []float64) float64 {
	return sumOf(xs) / float64(len(xs))
}

// CreationOrderSlope is the least-squares k of values (positive, in the
// order made) over their mean against 1 + k × place: 1 for the first
// made, −1 for the last, evenly between.
func CreationOrderSlope(values []float64) float64 {
	mean := meanOf(values)
	var num, den float64
	for i, v := range values {
		place := creationPlace(i, len(values))
		num += (v/mean - 1) * place
		den += place * place
	}
	return num / den
}

// creationPlace is the i-th of n workers' place in the order they were
// made: 1 for the first, −1 for the last, evenly between (as the model's
// sim.CreationPlace, which this package may not import: the model's tests
// check these fits against it).
func creationPlace(i, n int) float64 {
	return 1 - 2*float64(i)/float64(n-1)
}
