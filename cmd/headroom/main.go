// Command headroom runs more virtual machines on a host than its RAM holds,
// safely, and measures what that costs. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/microvm/guest"
	"github.com/headroom-dev/headroom/internal/suggest"
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
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newLoadCommand(), newAgentCommand(), newDensityCommand(), newReportCommand(), newVMCommand(), newSwapCommand(), newSimCommand(), newCalcCommand())
	root.InitDefaultCompletionCmd()
	refuseUnknownSubcommands(root)
	return root
}

// flagError is bad input on the command line. An unknown flag a typo away
// from one the command has is answered with that one.
func flagError(c *cobra.Command, err error) error {
	if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
		if near := nearestFlag(c.Flags(), name); near != "" {
			err = fmt.Errorf("%w (did you mean --%s?)", err, near)
		}
	}
	return usageError{err}
}

// nearestFlag is the visible flag of fl a typo away from name, if one is.
func nearestFlag(fl *pflag.FlagSet, name string) string {
	return suggest.Nearest(name, flagNames(fl))
}

// refuseUnknownSubcommands makes a word that names none of a group's
// subcommands (`headroom swap frob`) bad input, as it is at the top level:
// cobra shows a group's help for it and exits 0.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.DisableFlagsInUseLine = true
		c.Args = cobra.NoArgs
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
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
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		fmt.Fprintf(os.Stderr, "headroom: %s\n", oneLine(err.Error()))
		return 2
	}
	fmt.Fprintf(os.Stderr, "headroom: %v\n", err)
	return 1
}

// oneLine joins a message's lines (a parser's errors come one a line) so
// bad input is always answered in one line.
func oneLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(slices.DeleteFunc(lines, func(l string) bool { return l == "" }), " ")
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
