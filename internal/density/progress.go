package density

import (
	"sync"
	"time"

	"github.com/headroom-dev/headroom/internal/loadctl"
)

// progress reports the step's state to the reporter every 500 ms.
func (h *Harness) progress(index, n int, start time.Time, ctl *loadctl.Controller) (stop func()) {
	return Every(500*time.Millisecond, func() {
		h.rep.Status(index, n, ctl.ReadyCount(), time.Since(start), h.rates.sum())
	})
}

// Every calls f every interval until stop is called; stop returns once f
// is no longer running.
func Every(interval time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				f()
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// rates keeps each worker's latest interval rate.
type rates struct {
	mu sync.Mutex
	m  map[string]float64
}

func (r *rates) reset() {
	r.mu.Lock()
	r.m = map[string]float64{}
	r.mu.Unlock()
}

func (r *rates) set(worker string, v float64) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]float64{}
	}
	r.m[worker] = v
	r.mu.Unlock()
}

func (r *rates) sum() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0.0
	for _, v := range r.m {
		total += v
	}
	return total
}
