package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/headroom-dev/headroom/internal/swaptier"
	"github.com/headroom-dev/headroom/internal/swaptier/tierspec"
)

func newSwapCommand() *cobra.Command {
	var statePath string
	cmd := &cobra.Command{
		Use:   "swap",
		Short: "Set up, show and tear down swap tiers: a swap file, zram in front of it, zswap",
		Long: `headroom swap sets up the swap a host or a test runs with in one command
and removes exactly what it made. Faster tiers are used first: zswap
caches pages on their way to a swap device; zram (priority 100 by
default) fills before the swap file (priority 10).`,
	}
	cmd.PersistentFlags().StringVar(&statePath, "state", swaptier.DefaultStatePath, "file where swap up records what it made, for swap down and swap status")
	cmd.AddCommand(newSwapUpCommand(&statePath), newSwapDownCommand(&statePath), newSwapStatusCommand(&statePath))
	return cmd
}

// zswapOn is --zswap's value when the flag is given bare.
const zswapOn = "on"

func newSwapUpCommand(statePath *string) *cobra.Command {
	var file, zram, zswap string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "up [--file SIZE[,path=P,priority=N]] [--zram SIZE[,algorithm=A,priority=N,writeback=DEV]] [--zswap[=max_pool_percent=N,compressor=C]]",
		Short: "Set up swap tiers (refuses unsafe sizes before changing anything)",
		Example: `  headroom swap up --file 8Gi
  headroom swap up --file 8Gi --zram 4Gi,algorithm=lz4
  headroom swap up --file 8Gi --zswap=max_pool_percent=20,compressor=lz4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var spec tierspec.Spec
			if file != "" {
				f, err := tierspec.ParseFile(file)
				if err != nil {
					return usageError{err}
				}
				spec.File = &f
			}
			if zram != "" {
				z, err := tierspec.ParseZram(zram)
				if err != nil {
					return usageError{err}
				}
				spec.Zram = &z
			}
			if cmd.Flags().Changed("zswap") {
				opts := zswap
				if opts == zswapOn {
					opts = ""
				}
				z, err := tierspec.ParseZswap(opts)
				if err != nil {
					return usageError{err}
				}
				spec.Zswap = &z
			}
			setup, err := swaptier.Up(spec, *statePath)
			if swaptier.IsInputError(err) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, swapChange{Made: setup.Made, State: *statePath})
			}
			for _, m := range setup.Made {
				fmt.Fprintf(cmd.OutOrStdout(), "up: %s %s\n", m.Kind, m.Device)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recorded in %s; `headroom swap down` removes it\n", *statePath)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print what was made as JSON")
	f.StringVar(&file, "file", "", "a swap file: SIZE[,path=P,priority=N] (default path: a new directory in /var/tmp; priority 10)")
	f.StringVar(&zram, "zram", "", "a zram device: SIZE[,algorithm=A,priority=N,writeback=DEV] (at most twice RAM; priority 100)")
	f.StringVar(&zswap, "zswap", "", "turn zswap on: --zswap or --zswap=max_pool_percent=N,compressor=C")
	f.Lookup("zswap").NoOptDefVal = zswapOn
	return cmd
}

// swapChange is what `swap up` made or `swap down` removed (--json).
type swapChange struct {
	Made    []swaptier.Made `json:"made,omitempty"`
	Removed []swaptier.Made `json:"removed"`
	State   string          `json:"state"`
}

func newSwapDownCommand(statePath *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the swap tiers `swap up` made, and nothing else",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return usagef("swap down needs root: it turns swap devices and zswap off")
			}
			setup, err := swaptier.LoadState(*statePath)
			if err != nil {
				return err
			}
			if setup == nil {
				if asJSON {
					return printJSON(cmd, swapChange{Removed: []swaptier.Made{}, State: *statePath})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "nothing to take down: %s records no swap made by headroom\n", *statePath)
				return nil
			}
			made := append([]swaptier.Made(nil), setup.Made...)
			if err := setup.Down(); err != nil {
				return fmt.Errorf("%w (still recorded in %s)", err, *statePath)
			}
			slices.Reverse(made) // taken down in the reverse order
			if asJSON {
				return printJSON(cmd, swapChange{Removed: made, State: *statePath})
			}
			for _, m := range made {
				fmt.Fprintf(cmd.OutOrStdout(), "down: %s %s\n", m.Kind, m.Device)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was removed as JSON")
	return cmd
}

func newSwapStatusCommand(statePath *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each swap tier's use, compression ratio and the RAM it takes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := swaptier.ReadStatus(*statePath)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, st)
			}
			st.Print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
