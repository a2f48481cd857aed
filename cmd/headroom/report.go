package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/headroom-dev/headroom/internal/report"
)

func newReportCommand() *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report RUN_DIR...",
		Short: "Draw density or sim results as an interactive HTML page and PNGs",
		Long: `Reads one or more result directories (from headroom density or headroom sim)
and writes one self-contained HTML page (its chart library embedded: it opens
offline) with interactive charts: aggregate pages/s vs workers (log scale) with
the detected regime boundaries and the swap device's measured random-read rate;
per-worker pages/s spread per step; swap-in/out and major faults; PSI; creation
latency p50/p95/p99; and why each ramp stopped. Point to read a value, click a
legend entry to toggle a series, drag to zoom the x axis, click a worker count
to open that step's timelines (pages/s per worker, swap traffic, PSI, balloons).
Several runs overlay on the same axes. PNG files of the charts are written beside
the page (<name>-aggregate.png, ...). --json prints the computed summary, and
writes the page and PNGs only when -o is given.`,
		Example: `  headroom report results/20261121-120000-density -o report.html
  headroom report results/seq results/random --json`,
		Args: func(_ *cobra.Command, dirs []string) error {
			if len(dirs) == 0 {
				return usageError{errors.New("report needs a result directory: headroom report RUN_DIR... (from headroom density or headroom sim)")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, dirs []string) error {
			runs, err := report.Load(dirs)
			if err != nil {
				return usageError{err}
			}
			// --json alone is a reader after the summary: the page and its
			// PNGs are written where -o says, never into the working
			// directory unasked.
			if !asJSON || cmd.Flags().Changed("output") {
				if err := makeOutputDir("-o", filepath.Dir(out)); err != nil {
					return err
				}
				charts, err := report.Write(runs, out)
				if err != nil {
					return err
				}
				if !asJSON {
					w := cmd.OutOrStdout()
					fmt.Fprintf(w, "report: %s\n", out)
					for _, c := range charts {
						fmt.Fprintf(w, "chart: %s\n", c.PNG)
					}
					return nil
				}
			}
			return printJSON(cmd, report.Summarize(runs))
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "report.html", "HTML file to write (PNGs go beside it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the computed summary as JSON (the page too only with -o)")
	return cmd
}
