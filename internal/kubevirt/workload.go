package kubevirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-dev/headroom/internal/loadctl"
	"github.com/headroom-dev/headroom/internal/loadrun"
	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/results"
)

// Placeholders in a template's cloud-init user data that Instantiate
// replaces per object.
const (
	WorkerPlaceholder = "${HEADROOM_WORKER}" // the object's name: the worker id
	IndexPlaceholder  = "${HEADROOM_INDEX}"  // its number within the step
)

// Workload runs `headroom load` in every guest, joined to the controller
// density runs: the guests fetch the headroom binary over HTTP from the
// controller's port + 1 and dial the controller's port.
type Workload struct {
	// Address is host:port as the guests reach this machine.
	Address string
	// LoadArgs are `headroom load`'s flags, without the controller's.
	LoadArgs []string
	// Seed is the base seed; each guest adds its index.
	Seed uint64
	// Runtime is the measured phase (the workers' --duration).
	Runtime time.Duration
	// Executable is the headroom binary served to the guests.
	Executable string
}

// NewWorkload is the workload p (its seed the base of the guests') run in
// every guest, joined to the controller at address; exe is served to them.
func NewWorkload(address, exe string, p memload.Params) (*Workload, error) {
	if err := p.Validate(uint64(os.Getpagesize())); err != nil {
		return nil, err
	}
	w := &Workload{Address: address, Seed: p.Seed, Runtime: p.Duration, Executable: exe}
	if _, _, _, err := w.Ports(); err != nil {
		return nil, err
	}
	// The seed comes per guest, from the user data.
	args := loadrun.Args(p)
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "--seed" {
			args = append(args[:i:i], args[i+2:]...)
			break
		}
	}
	w.LoadArgs = args
	return w, nil
}

// Ports are the controller's and the binary server's.
func (w Workload) Ports() (host string, controller, binary int, err error) {
	host, p, err := net.SplitHostPort(w.Address)
	if err != nil {
		return "", 0, 0, fmt.Errorf("--controller-address %q: want host:port", w.Address)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65534 || host == "" {
		return "", 0, 0, fmt.Errorf("--controller-address %q: want host:port with a port from 1 to 65534 (port+1 serves the binary)", w.Address)
	}
	return host, port, port + 1, nil
}

// UserData is the guest's cloud-init script: fetch headroom, run the
// workload as worker ${HEADROOM_WORKER} joined to the controller.
func (w Workload) UserData() (string, error) {
	host, ctl, bin, err := w.Ports()
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("http://%s/headroom", net.JoinHostPort(host, strconv.Itoa(bin)))
	quoted := make([]string, len(w.LoadArgs))
	for i, a := range w.LoadArgs {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return fmt.Sprintf(`#!/bin/sh
# headroom density: fetch headroom from the controller and run the workload.
set -e
# A directory of its own: guests that share a /tmp (the test's stand-in runs
# them side by side) must not rewrite a binary another one is executing.
bin="$(mktemp -d)/headroom"
curl -fsS -o "$bin" %[1]s || wget -q -O "$bin" %[1]s
chmod +x "$bin"
exec "$bin" load %[2]s --seed $((%[3]d + %[4]s)) --controller tcp:%[5]s --worker-id %[6]s
`, url, strings.Join(quoted, " "), w.Seed, IndexPlaceholder, net.JoinHostPort(host, strconv.Itoa(ctl)), WorkerPlaceholder), nil
}

// workloadServer is the controller and the binary server of a run.
type workloadServer struct {
	ctl  *loadctl.Controller
	http *http.Server
}

// startWorkload listens on the controller's port and serves the binary on
// the next one, on every interface.
func startWorkload(w Workload) (*workloadServer, error) {
	_, ctlPort, binPort, err := w.Ports()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(w.Executable); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(binPort))
	if err != nil {
		return nil, fmt.Errorf("serve the headroom binary: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /headroom", func(rw http.ResponseWriter, r *http.Request) { http.ServeFile(rw, r, w.Executable) })
	s := &workloadServer{http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go s.http.Serve(ln)
	return s, s.listen(ctlPort)
}

// listen starts a fresh controller for a step (a controller's workers are
// one step's).
func (s *workloadServer) listen(port int) (err error) {
	s.ctl, err = loadctl.Listen("tcp::" + strconv.Itoa(port))
	if err != nil {
		s.http.Close()
	}
	return err
}

func (s *workloadServer) close() {
	if s.ctl != nil {
		s.ctl.Close()
	}
	s.http.Close()
}

// measure waits for the step's workers to be ready (populated), starts
// them together and collects their rates into the step.
func (r *runner) measure(ctx context.Context, step *results.Step, names []string) error {
	ctl := r.work.ctl
	readyCtx, cancel := context.WithTimeout(ctx, r.p.Timeout)
	defer cancel()
	if err := ctl.AwaitReady(readyCtx, len(names)); err != nil {
		return fmt.Errorf("%d of %d workers ready within %s: %v", ctl.ReadyCount(), len(names), r.p.Timeout, err)
	}
	// Remote workers: a lead long enough for the start message to reach
	// every guest over the pod network.
	ctl.Start(time.Second + time.Duration(len(names))*time.Millisecond)
	collectCtx, cancelCollect := context.WithTimeout(ctx, r.p.Workload.Runtime+30*time.Second)
	defer cancelCollect()
	res := ctl.Collect(collectCtx, loadctl.CollectOptions{StopGrace: 10 * time.Second, Silence: 30 * time.Second})
	byName := map[string]loadctl.Result{}
	for _, x := range res {
		byName[x.Worker] = x
	}
	step.StartSkewSeconds = loadctl.StartSkew(res).Seconds()
	var errs []error
	for i := range step.PerWorker {
		w := &step.PerWorker[i]
		x, ok := byName[w.Name]
		switch {
		case !ok:
			w.Error = "never joined the controller"
		case x.Summary != nil:
			w.PagesPerSec, w.MajorFaultsPerSec = x.Summary.PagesPerSec, x.Summary.MajorFaultsPerSec
			if x.Summary.StopReason != memload.StopDuration {
				w.Error = "stopped early: " + x.Summary.StopReason
			}
			if x.Populate != nil {
				w.PopulateSeconds = x.Populate.Seconds
			}
		default:
			w.Error = x.Err
		}
		step.AggregatePagesPerSec += w.PagesPerSec
		if w.Error != "" {
			errs = append(errs, fmt.Errorf("worker %s %s", w.Name, w.Error))
		}
	}
	return errors.Join(errs...)
}
