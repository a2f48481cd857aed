package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/units"
)

// Flag value types: each parses its own syntax and, on bad input, says what
// form is accepted; pflag prefixes the flag's name.

type bytesValue uint64

func (v *bytesValue) String() string { return units.FormatBytes(uint64(*v)) }
func (v *bytesValue) Type() string   { return "size" }
func (v *bytesValue) Set(s string) error {
	n, err := units.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, units.SizeForm)
	}
	*v = bytesValue(n)
	return nil
}

type rateValue float64

func (v *rateValue) String() string { return fmt.Sprint(float64(*v)) }
func (v *rateValue) Type() string   { return "pages/s" }
func (v *rateValue) Set(s string) error {
	f, err := units.ParseRate(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, units.RateForm)
	}
	*v = rateValue(f)
	return nil
}

type fractionValue float64

func (v *fractionValue) String() string { return fmt.Sprint(float64(*v)) }
func (v *fractionValue) Type() string   { return "fraction" }
func (v *fractionValue) Set(s string) error {
	f, err := units.ParseFraction(s)
	if err != nil {
		return fmt.Errorf("%v; want a number from 0 to 1", err)
	}
	*v = fractionValue(f)
	return nil
}

type scanValue memload.Scan

func (v *scanValue) String() string { return string(*v) }
func (v *scanValue) Type() string   { return "none|seq|random" }
func (v *scanValue) Set(s string) error {
	sc, err := memload.ParseScan(s)
	if err != nil {
		return fmt.Errorf("%v; want none, seq or random", err)
	}
	*v = scanValue(sc)
	return nil
}

type contentValue memload.Content

func (v *contentValue) String() string { return memload.Content(*v).String() }
func (v *contentValue) Type() string   { return "content" }
func (v *contentValue) Set(s string) error {
	c, err := memload.ParseContent(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, memload.ContentForm)
	}
	*v = contentValue(c)
	return nil
}

type hugePagesValue memload.HugePages

func (v *hugePagesValue) String() string { return string(*v) }
func (v *hugePagesValue) Type() string   { return "never|madvise" }
func (v *hugePagesValue) Set(s string) error {
	switch memload.HugePages(s) {
	case memload.HugePagesNever, memload.HugePagesMadvise:
		*v = hugePagesValue(s)
		return nil
	}
	return fmt.Errorf("unknown hugepages mode %q; want never or madvise", s)
}

// rampFlags are the flags headroom density and headroom sim share: the
// ramp, each worker's declared memory and request, and its workload.
type rampFlags struct {
	deployments          string
	vmMemory, memorySize bytesValue
	scan                 scanValue
	writes               fractionValue
	rate                 rateValue
	content              contentValue
	runtime              time.Duration
	overcommit           float64
	overhead             bytesValue
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
