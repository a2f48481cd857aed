//go:build system

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/policy"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// The balloon node: 768 MiB of RAM and 512 MiB of swap, two VMs of 512
// MiB. "idle" holds a 64 MiB workload; "grower" sleeps, then its working
// set grows by 6 × 40 MiB, one a second, and ends.
const (
	balloonNodeRAM  = 768 << 20
	balloonNodeSwap = 512 << 20
	balloonVMMemory = 512 << 20
	growerDelay     = 30 // seconds from the grower's start to its growth
	// recoveryBoundSeconds: the grower's memory must be back within this
	// of its growth (TestSystemBalloonController).
	recoveryBoundSeconds = 15
	growerScript         = "sleep 30; echo grow; for i in 1 2 3 4 5 6; do (/init load --size 40Mi --scan random --rate 10k --duration 8s >/dev/null || echo failed) & sleep 1; done; wait; echo done; sleep 300"
)

// signalWriter keeps a VM's output and closes a channel when a line is seen.
type signalWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	lines map[string]chan time.Time
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for line, ch := range w.lines {
		if strings.Contains(w.buf.String(), line+"\n") {
			select {
			case ch <- time.Now():
			default:
			}
			delete(w.lines, line)
		}
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

type balloonRun struct {
	records        []Record
	recoverySecs   float64 // from the growth to the grower's balloon back at 95% of its RAM
	reclaimedBytes uint64  // balloons' total just before the growth
	oomKills       int     // OOM kills inside both guests
	growerFailed   bool
}

// runBalloonNode boots the node and its two VMs under the agent with the
// given balloon flags, lets the grower grow, and reports what happened.
func runBalloonNode(t *testing.T, agentFlags ...string) balloonRun {
	img := testenv.GuestImage(t)
	testenv.SwapFile(t, balloonNodeSwap)
	node := testenv.NewMemoryCgroup(t, balloonNodeRAM)
	if err := node.Write("memory.memsw.limit_in_bytes", strconv.Itoa(balloonNodeRAM+balloonNodeSwap)); err != nil {
		t.Fatal(err)
	}
	metaDir := t.TempDir()
	live, stop := startAgent(t, node, metaDir, append([]string{"--balloon"}, agentFlags...)...)
	var records []Record
	var recMu sync.Mutex
	go func() {
		for r := range live {
			recMu.Lock()
			records = append(records, r)
			recMu.Unlock()
		}
	}()

	vms := map[string]*microvm.VM{}
	consoles := map[string]string{}
	grow, done := make(chan time.Time, 1), make(chan time.Time, 1)
	growerOut := &signalWriter{lines: map[string]chan time.Time{"grow": grow, "done": done}}
	for _, name := range []string{"idle", "grower"} {
		cg := node.Child(t, name, balloonVMMemory+192<<20)
		dir, err := os.MkdirTemp("", "hr-vm-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		sock := filepath.Join(dir, "qmp.sock")
		md, _ := json.Marshal(map[string]any{"name": name, "priority": 1, "memoryRequest": "256Mi", "qmp": sock})
		if err := os.WriteFile(filepath.Join(metaDir, name+".json"), md, 0o644); err != nil {
			t.Fatal(err)
		}
		consoles[name] = filepath.Join(t.TempDir(), "console.log")
		args := []string{"load", "--size", "64Mi", "--scan", "none", "--duration", "300s"}
		var out interface{ Write([]byte) (int, error) } = &testenv.Buffer{}
		if name == "grower" {
			args, out = []string{"/bin/sh", "-c", growerScript}, growerOut
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		vm, err := microvm.Start(ctx, microvm.Config{Image: img, Name: name, MemoryBytes: balloonVMMemory, Dir: dir, QMPSocket: sock,
			Console: consoles[name], Cgroup: cg.Path, Stdout: out, Stderr: out, GraceSeconds: 5, Args: args})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vm.Close() })
		vms[name] = vm
	}
	balloonOf := func(name string) uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		actual, _ := vms[name].QMP().QueryBalloon(ctx)
		return actual
	}

	// Diagnostics: the agent's view every second.
	diagDone := make(chan struct{})
	defer close(diagDone)
	go func() {
		for {
			select {
			case <-diagDone:
				return
			case <-time.After(time.Second):
			}
			resp, err := http.Get("http://127.0.0.1:19731/v1/snapshot")
			if err != nil {
				continue
			}
			var v View
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			line := ""
			if v.Balloon != nil {
				line = fmt.Sprintf("%s free=%dMiB", v.Balloon.HostState, (v.Sample.Scope.RAMBytes-min(v.Sample.Scope.RAMBytes, v.Sample.Scope.WorkingSetBytes))>>20)
			}
			for _, w := range v.Workloads {
				if g := w.Guest; g != nil {
					line += fmt.Sprintf(" %s[cur=%d total=%d avail=%d age=%.1f tgt=%d]", w.Name, g.MemoryBytes>>20, g.TotalBytes>>20, g.AvailableBytes>>20, g.AgeSeconds, v.Balloon.Targets[w.Name]>>20)
				}
			}
			t.Logf("view: %s", line)
		}
	}()
	var run balloonRun
	var grewAt time.Time
	select {
	case grewAt = <-grow:
	case <-time.After(growerDelay*time.Second + 60*time.Second):
		t.Fatalf("the grower never grew; its output: %s", growerOut.String())
	}
	for _, name := range []string{"idle", "grower"} {
		run.reclaimedBytes += balloonVMMemory - min(balloonOf(name), balloonVMMemory)
	}
	// Recovery: the grower's memory back at 95% of its RAM.
	var trace []string
	for time.Since(grewAt) < 30*time.Second {
		actual := balloonOf("grower")
		trace = append(trace, fmt.Sprintf("%.1fs:%dMiB", time.Since(grewAt).Seconds(), actual>>20))
		if actual >= balloonVMMemory*95/100 {
			run.recoverySecs = time.Since(grewAt).Seconds()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if run.recoverySecs == 0 {
		run.recoverySecs = -1
	}
	t.Logf("grew at %s; the grower's memory since: %s", grewAt.Format("15:04:05.000"), strings.Join(trace[:min(len(trace), 40)], " "))
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Errorf("the grower's workloads did not finish; its output: %s", growerOut.String())
	}
	run.growerFailed = strings.Contains(growerOut.String(), "failed")
	for name, console := range consoles {
		b, _ := os.ReadFile(console)
		run.oomKills += strings.Count(string(b), "Out of memory: Killed process")
		if strings.Contains(string(b), "Kernel panic") {
			t.Errorf("%s panicked:\n%s", name, b)
		}
	}
	// The agent stops: every balloon it inflated is deflated.
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for _, name := range []string{"idle", "grower"} {
		for balloonOf(name) < balloonVMMemory*95/100 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if got := balloonOf(name); got < balloonVMMemory*95/100 {
			t.Errorf("%s left ballooned at %d MiB after the agent stopped", name, got>>20)
		}
	}
	recMu.Lock()
	run.records = records
	recMu.Unlock()
	return run
}

func balloonLines(records []Record) []Record {
	var out []Record
	for _, r := range records {
		if r.Action == policy.ActionSetBalloon {
			out = append(out, r)
		}
	}
	return out
}

// The headroom controller (minFree 512 MiB, so the node starts in the
// soft state) balloons both idle guests down to their floors, gives the
// grower its memory back at once when it grows, kills nothing; MOM's
// rules run the same scenario for comparison.
func TestSystemBalloonController(t *testing.T) {
	runs := map[string]balloonRun{}
	for _, pol := range []string{policy.BalloonHeadroom, policy.BalloonMOM} {
		t.Run(pol, func(t *testing.T) {
			run := runBalloonNode(t, "--listen", "127.0.0.1:19731", "--balloon-policy", pol, "--balloon-min-free", "512Mi", "--balloon-mom-interval", "10s")
			runs[pol] = run
			lines := balloonLines(run.records)
			for _, r := range lines {
				t.Logf("%s %s → %d MiB: %s", r.Time.Format("15:04:05.000"), r.Workload, r.Balloon.TargetBytes>>20, r.Reason)
				if r.Error != "" {
					t.Errorf("set_balloon failed: %s", r.Error)
				}
				if pol == policy.BalloonHeadroom && r.Balloon.TargetBytes < r.Balloon.MaxBytes && r.Balloon.TargetBytes < r.Balloon.FloorBytes {
					t.Errorf("ballooned %s below its floor: %+v", r.Workload, r.Balloon)
				}
			}
			t.Logf("%s: %d MiB reclaimed before the growth, grower's memory back in %.2f s, %d OOM kills in the guests, grower failed: %v",
				pol, run.reclaimedBytes>>20, run.recoverySecs, run.oomKills, run.growerFailed)
			if run.oomKills > 0 || run.growerFailed {
				t.Errorf("%s: %d OOM kills in the guests (grower's workloads failed: %v)", pol, run.oomKills, run.growerFailed)
			}
			if pol == policy.BalloonHeadroom {
				if run.reclaimedBytes < 300<<20 {
					t.Errorf("reclaimed %d MiB before the growth, want ≥ 300 (both guests to their floors)", run.reclaimedBytes>>20)
				}
				// The target is < 5 s: bench/balloon-recovery.sh
				// measures it (1.8-3.4 s on this machine idle,
				// 2026-11-26); two busy cores beside the TCG guests made
				// it 6.1 s. The test holds the controller to giving the
				// memory back at once, not at MOM's pace (+5% per 10 s:
				// minutes).
				if run.recoverySecs < 0 || run.recoverySecs > recoveryBoundSeconds {
					t.Errorf("the grower's memory came back in %.2f s (-1: never), want < %d s", run.recoverySecs, recoveryBoundSeconds)
				}
			}
		})
	}
	h, m := runs[policy.BalloonHeadroom], runs[policy.BalloonMOM]
	fmt.Printf("balloon: headroom reclaimed %d MiB, recovery %.2f s, %d OOM kills; mom reclaimed %d MiB, recovery %.2f s, %d OOM kills\n",
		h.reclaimedBytes>>20, h.recoverySecs, h.oomKills, m.reclaimedBytes>>20, m.recoverySecs, m.oomKills)
}
