package loadrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/memload"
)

// FleetSummary aggregates a local fleet's workers.
type FleetSummary struct {
	Type              string  `json:"type"` // "summary"
	Workers           int     `json:"workers"`
	Failed            int     `json:"failed"`
	Pages             uint64  `json:"pages"`
	Seconds           float64 `json:"seconds"`
	PagesPerSec       float64 `json:"pages_per_sec"` // sum of the workers' rates
	MajorFaults       uint64  `json:"major_faults"`
	MinorFaults       uint64  `json:"minor_faults"`
	MajorFaultsPerSec float64 `json:"major_faults_per_sec"`
	// PopulateSeconds is the slowest worker's populate time.
	PopulateSeconds  float64        `json:"populate_seconds"`
	StartSkewSeconds float64        `json:"start_skew_seconds"`
	Params           memload.Params `json:"params"`
}

// Aggregate sums finished workers' summaries.
func Aggregate(results []loadctl.Result, params memload.Params) FleetSummary {
	params.Normalize()
	s := FleetSummary{Type: "summary", Workers: len(results), Params: params,
		StartSkewSeconds: loadctl.StartSkew(results).Seconds()}
	for _, r := range results {
		if r.Populate != nil {
			s.PopulateSeconds = max(s.PopulateSeconds, r.Populate.Seconds)
		}
		if r.Failed() {
			s.Failed++
			continue
		}
		w := r.Summary
		s.Pages += w.Pages
		s.Seconds = max(s.Seconds, w.Seconds)
		s.PagesPerSec += w.PagesPerSec
		s.MajorFaults += w.MajorFaults
		s.MinorFaults += w.MinorFaults
		s.MajorFaultsPerSec += w.MajorFaultsPerSec
	}
	return s
}

// startLead is how far ahead the start time is set: enough to deliver the
// start message to every worker before any begins.
func startLead(workers int) time.Duration {
	return 10*time.Millisecond + time.Duration(workers)*200*time.Microsecond
}

// Fleet runs n worker processes of exe (this binary) under a local
// controller, releases them together and prints per-worker and aggregate
// results. Worker i uses seed Params.Seed+i, so their random sequences and
// unique pages differ.
func Fleet(ctx context.Context, o Options, n int, exe string, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "headroom-load-")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRunFailed, err)
	}
	defer os.RemoveAll(dir)
	ctl, err := loadctl.Listen("unix:" + filepath.Join(dir, "controller.sock"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRunFailed, err)
	}
	defer ctl.Close()

	p := newPrinter(o.Out, o.JSON)
	p.header(o.Params)
	readyCtx, cancelReady := context.WithCancelCause(ctx)
	defer cancelReady(nil)
	procs := make([]*workerProcess, 0, n)
	defer func() { stopProcesses(procs) }()
	for i := range n {
		name := fmt.Sprintf("w%d", i+1)
		params := o.Params
		params.Seed += uint64(i + 1)
		args := append([]string{"load"}, Args(params)...)
		args = append(args, "--controller", ctl.Addr(), "--worker-id", name)
		cmd := exec.Command(exe, args...)
		cmd.Stderr = stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("%w: start worker %s: %v", ErrRunFailed, name, err)
		}
		wp := &workerProcess{cmd: cmd, exited: make(chan struct{})}
		procs = append(procs, wp)
		go func() {
			err := cmd.Wait()
			close(wp.exited)
			cancelReady(fmt.Errorf("worker %s (pid %d) exited: %v", name, cmd.Process.Pid, exitText(err)))
		}()
	}
	p.note("%d workers started; waiting for them to populate", n)
	if err := ctl.AwaitReady(readyCtx, n); err != nil {
		return fmt.Errorf("%w: %v", ErrRunFailed, err)
	}
	ctl.Start(startLead(n))
	p.note("all %d workers ready; started", n)

	latest := newLatestRates()
	stopProgress := p.progress(latest, o.Params.Interval)
	results := ctl.Collect(ctx, loadctl.CollectOptions{StopGrace: 10 * time.Second, OnRecord: func(r memload.Record) {
		latest.set(r.Worker, r.PagesPerSec)
		if o.JSON {
			p.record(r)
		}
	}})
	stopProgress()
	for _, r := range results {
		if r.Summary != nil && o.JSON {
			p.summary(*r.Summary)
		}
	}
	agg := Aggregate(results, o.Params)
	p.fleet(results, agg)
	if agg.Failed > 0 {
		return fmt.Errorf("%w: %d of %d workers failed", ErrRunFailed, agg.Failed, n)
	}
	return nil
}

// workerProcess is a started worker; exited is closed once it was reaped.
type workerProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// stopProcesses ends workers that are still running (SIGTERM, then SIGKILL
// after a grace period) and waits until every one has been reaped.
func stopProcesses(procs []*workerProcess) {
	for _, wp := range procs {
		select {
		case <-wp.exited:
		default:
			wp.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	grace := time.NewTimer(5 * time.Second)
	defer grace.Stop()
	for _, wp := range procs {
		select {
		case <-wp.exited:
		case <-grace.C:
			for _, other := range procs {
				other.cmd.Process.Kill()
			}
			<-wp.exited
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// latestRates keeps each worker's most recent interval rate for progress.
type latestRates struct {
	mu    sync.Mutex
	rates map[string]float64
}

func newLatestRates() *latestRates { return &latestRates{rates: map[string]float64{}} }

func (l *latestRates) set(worker string, v float64) {
	l.mu.Lock()
	l.rates[worker] = v
	l.mu.Unlock()
}

func (l *latestRates) sum() (total float64, reporting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.rates {
		total += v
	}
	return total, len(l.rates)
}
