package swaptier

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/units"
)

// TierStatus is one tier as `swap status` shows it.
type TierStatus struct {
	host.SwapTier
	CompressionRatio float64 `json:"compression_ratio,omitempty"`
	// MadeByHeadroom: `swap down` removes it.
	MadeByHeadroom bool `json:"made_by_headroom"`
}

// Status is every swap tier on the host, fastest first.
type Status struct {
	Tiers []TierStatus `json:"tiers"`
	// RAMBytes is what the compressed tiers take from RAM.
	RAMBytes uint64 `json:"ram_bytes"`
	// StateError says why the state file could not be read (a user
	// without root, say): then which tiers headroom made is unknown.
	StateError string `json:"state_error,omitempty"`
}

// ReadStatus reads the tiers and marks those the state file records.
func ReadStatus(statePath string) (Status, error) {
	tiers, err := host.ReadSwapTiers()
	if err != nil {
		return Status{}, err
	}
	// The tiers are the host's to show whatever the record says.
	st := Status{Tiers: []TierStatus{}}
	setup, err := LoadState(statePath)
	if err != nil {
		st.StateError = fmt.Sprintf("which tiers headroom made is unknown: %v", err)
	}
	for _, t := range sortTiers(tiers) {
		ts := TierStatus{SwapTier: t, CompressionRatio: t.CompressionRatio()}
		if setup != nil {
			for _, m := range setup.Made {
				ts.MadeByHeadroom = ts.MadeByHeadroom || m.Device == t.Device
			}
		}
		st.RAMBytes += t.RAMBytes
		st.Tiers = append(st.Tiers, ts)
	}
	return st, nil
}

// sortTiers orders tiers as the kernel uses them: zswap first, then by
// descending swap priority.
func sortTiers(tiers []host.SwapTier) []host.SwapTier {
	out := slices.Clone(tiers)
	slices.SortStableFunc(out, func(a, b host.SwapTier) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}

// Print writes the status as a table.
func (st Status) Print(w io.Writer) {
	if len(st.Tiers) == 0 {
		fmt.Fprintln(w, "no swap is on")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tier\tdevice\tpriority\tsize\tused\tstored\tRAM\tratio\talgorithm\tmade by headroom\t")
	for _, t := range st.Tiers {
		prio, stored, ram, ratio := fmt.Sprint(t.Priority), "-", "-", "-"
		if t.Kind == host.TierZswap {
			prio = "cache"
		}
		if t.Kind != host.TierDisk {
			stored, ram = units.FormatBytes(t.StoredBytes), units.FormatBytes(t.RAMBytes)
			if t.CompressionRatio > 0 {
				ratio = fmt.Sprintf("%.2f", t.CompressionRatio)
			}
		}
		made := "no"
		switch {
		case t.MadeByHeadroom:
			made = "yes"
		case st.StateError != "":
			made = "?"
		}
		alg := t.Algorithm
		if alg == "" {
			alg = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Kind, t.Device, prio,
			units.FormatBytes(t.SizeBytes), units.FormatBytes(t.UsedBytes), stored, ram, ratio, alg, made)
	}
	tw.Flush()
	fmt.Fprintf(w, "compressed tiers take %s of RAM\n", units.FormatBytes(st.RAMBytes))
	if st.StateError != "" {
		fmt.Fprintln(w, st.StateError)
	}
}
