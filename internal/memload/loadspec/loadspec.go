// Package loadspec is what `headroom load`'s workload is, apart from
// running it: its access pattern and its pages' content, with their
// grammars. It touches nothing of the machine, so the simulator models a
// workload without importing the package that runs one (memload).
package loadspec

import (
	"fmt"
	"strconv"
	"strings"
)

// Scan is the access pattern of the measured phase.
type Scan string

const (
	// ScanNone allocates and populates, then holds the memory untouched.
	ScanNone Scan = "none"
	// ScanSeq walks the block one stride at a time, wrapping at the end.
	ScanSeq Scan = "seq"
	// ScanRandom touches uniformly random strides.
	ScanRandom Scan = "random"
)

// ParseScan accepts none, seq or random (and ClusterBuster's 0, 1).
func ParseScan(s string) (Scan, error) {
	switch s {
	case "none", "0":
		return ScanNone, nil
	case "seq", "1", "sequential":
		return ScanSeq, nil
	case "random":
		return ScanRandom, nil
	}
	return "", fmt.Errorf("unknown scan %q", s)
}

// ContentKind is the class of data the workload's pages hold.
type ContentKind int

const (
	// ContentRandom pages are all different (nothing for KSM, nothing for zram).
	ContentRandom ContentKind = iota
	// ContentZero pages are all zero.
	ContentZero
	// ContentDup pages: a fraction is identical to other pages, the rest unique.
	ContentDup
	// ContentCompress pages compress about CompressRatio:1 with lz4/lzo.
	ContentCompress
)

// ContentForm describes the accepted --content syntax, for error messages.
const ContentForm = "zero, random, dup=F with F in [0,1], or compress=R with R in [1,64]"

// MaxDupTemplates bounds the number of distinct contents duplicate pages are
// drawn from, so that each duplicate has many twins (as identical guests do).
const MaxDupTemplates = 256

// Content is a parsed --content value.
type Content struct {
	Kind ContentKind
	// DupFraction is the fraction of pages identical to some other page (dup).
	DupFraction float64
	// CompressRatio is the target compression ratio of every page (compress).
	CompressRatio float64
}

// ParseContent parses "zero", "random", "dup=0.8" or "compress=3".
func ParseContent(s string) (Content, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(s), "=")
	switch name {
	case "random", "zero":
		if hasArg {
			return Content{}, fmt.Errorf("content %q takes no argument", name)
		}
		if name == "zero" {
			return Content{Kind: ContentZero}, nil
		}
		return Content{Kind: ContentRandom}, nil
	case "dup":
		f, err := strconv.ParseFloat(arg, 64)
		if !hasArg || err != nil || !(f >= 0 && f <= 1) {
			return Content{}, fmt.Errorf("invalid dup fraction %q", arg)
		}
		return Content{Kind: ContentDup, DupFraction: f}, nil
	case "compress":
		r, err := strconv.ParseFloat(arg, 64)
		if !hasArg || err != nil || !(r >= 1 && r <= 64) {
			return Content{}, fmt.Errorf("invalid compression ratio %q", arg)
		}
		return Content{Kind: ContentCompress, CompressRatio: r}, nil
	}
	return Content{}, fmt.Errorf("unknown content %q", s)
}

// String renders c in the form ParseContent accepts.
func (c Content) String() string {
	switch c.Kind {
	case ContentZero:
		return "zero"
	case ContentDup:
		return "dup=" + strconv.FormatFloat(c.DupFraction, 'g', -1, 64)
	case ContentCompress:
		return "compress=" + strconv.FormatFloat(c.CompressRatio, 'g', -1, 64)
	}
	return "random"
}
