package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/suggest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// rampFlags are the flags headroom density and headroom sim share: the
// ramp, each worker's declared memory and request, and its workload.
type rampFlags struct {
	deployments          string
	vmMemory, memorySize flagvalue.Bytes
	scan                 flagvalue.Scan
	writes               flagvalue.Fraction
	rate                 flagvalue.Rate
	content              flagvalue.Content
	runtime              time.Duration
	overcommit           float64
	overhead             flagvalue.Bytes
}

// register adds the flags with their current values as defaults; worker
// names what the command ramps, overheadUsage what --overhead means to it.
func (r *rampFlags) register(fl *pflag.FlagSet, worker, overheadUsage string) {
	fl.StringVar(&r.deployments, "deployments", r.deployments, worker+" counts: start:end:step or a list such as 1,2,4,8")
	fl.Var(&r.vmMemory, "vm-memory", "declared memory of each "+worker)
	fl.Var(&r.memorySize, "memory-size", "each workload's block (at most --vm-memory)")
	fl.Var(&r.scan, "memory-scan", "access pattern: seq, random or none")
	fl.Var(&r.writes, "writes", "fraction of touches that write, in [0,1]")
	fl.Var(&r.rate, "rate", "per-"+worker+" cap on pages/s (0: as fast as possible)")
	fl.Var(&r.content, "content", "page content: random, zero, dup=F, compress=R")
	fl.DurationVar(&r.runtime, "workload-runtime", r.runtime, "measured phase of each step")
	fl.Float64Var(&r.overcommit, "overcommit-percent", r.overcommit, "memory overcommit: request = vm-memory × 100 / percent (+ overhead)")
	fl.Var(&r.overhead, "overhead", overheadUsage)
}

// printJSON writes v to the command's output as --json prints it:
// indented, one document.
func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkOutputDir refuses, as bad input, an output directory a command
// could not create, before the command sets anything up; it creates
// nothing (a run that fails before its start leaves no directory). ""
// (the command's default) is not checked.
func checkOutputDir(flag, dir string) error {
	if dir == "" {
		return nil
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			return nil
		case err == nil && p == filepath.Clean(dir):
			return usagef("%s %s: not a directory", flag, dir)
		case err == nil:
			return usagef("%s %s: %s is not a directory", flag, dir, p)
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR): // a file on the way is found above
			return usagef("%s %s: %v", flag, dir, err)
		case filepath.Dir(p) == p:
			return nil
		}
	}
}

// makeOutputDir creates the directory a flag names for a command's output
// before the command starts work, so a path that cannot be one is bad
// input (exit 2), not a failure after the run.
func makeOutputDir(flag, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return usagef("%s %s: %v", flag, dir, err)
	}
	return nil
}

// flagNames are the names of fl's visible flags, but for except.
func flagNames(fl *pflag.FlagSet, except ...string) []string {
	var names []string
	fl.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && !slices.Contains(except, f.Name) {
			names = append(names, f.Name)
		}
	})
	return names
}

// unknownKey says that a file's key is none of known, the flags' names:
// the one a typo away, or else all of them.
func unknownKey(key string, known []string) string {
	if near := suggest.Nearest(key, known); near != "" {
		return fmt.Sprintf("key %q does not exist (did you mean %s?)", key, near)
	}
	return fmt.Sprintf("key %q does not exist; keys are the flags' names: %s", key, strings.Join(known, ", "))
}

// progressTo writes a long measurement's progress lines to w (stderr:
// stdout holds the result, and --json's).
func progressTo(w io.Writer) func(string) {
	return func(line string) { fmt.Fprintln(w, line) }
}
