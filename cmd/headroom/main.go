// Command headroom runs more virtual machines on a host than its RAM holds,
// safely, and measures what that costs. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/headroom-dev/headroom/internal/microvm/guest"
)

// usageError is bad input: printed as one line, exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "headroom",
		Short: "Memory overcommit for VM hosts: workloads, agent, density benchmark",
		Long: `headroom lets operators run more virtual machines on a host than its RAM
holds, safely, and measure exactly what that costs.`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newLoadCommand(), newAgentCommand(), newDensityCommand(), newReportCommand(), newVMCommand(), newSwapCommand(), newSimCommand(), newCalcCommand())
	return root
}

func main() {
	if guest.IsInit() {
		guest.Main() // headroom is a micro-VM guest's /init
	}
	os.Exit(run(os.Args[1:]))
}

// run executes the command line and maps errors to exit codes: 2 for bad
// input, 1 for failures after the input was accepted.
func run(args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	handler := &signalHandler{cancel: cancel, exit: os.Exit, now: time.Now, stderr: os.Stderr}
	ctx = context.WithValue(ctx, signalHandlerKey{}, handler)
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		for sig := range signals {
			handler.handle(sig)
		}
	}()
	root := newRootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status) // the guest command printed its own error
	}
	fmt.Fprintf(os.Stderr, "headroom: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		return 2
	}
	return 1
}

// isCobraUsageError recognises cobra's own argument errors (unknown command,
// wrong argument count), which it does not route through the flag error func.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "accepts ", "requires ", "unknown flag", "unknown shorthand"} {
		if len(msg) >= len(prefix) && msg[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
