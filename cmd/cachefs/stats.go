package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/units"
)

func newStatsCmd() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "stats --cache-dir DIR",
		Short: "Show what a cache directory holds (works while a mount is using it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := cache.ReadInfo(dir)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			pct := 0.0
			if info.CapacityBytes > 0 {
				pct = 100 * float64(info.UsedBytes) / float64(info.CapacityBytes)
			}
			fmt.Fprintf(w, "cache dir\t%s\n", info.Dir)
			fmt.Fprintf(w, "policy\t%s\n", info.Policy)
			fmt.Fprintf(w, "entries\t%d\n", info.Entries)
			fmt.Fprintf(w, "used\t%s (%d bytes, %.1f%% of capacity)\n", units.FormatSize(info.UsedBytes), info.UsedBytes, pct)
			fmt.Fprintf(w, "capacity\t%s (%d bytes)\n", units.FormatSize(info.CapacityBytes), info.CapacityBytes)
			fmt.Fprintf(w, "temp files\t%d\n", info.TempFiles)
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "cache-dir", "", "cache directory to inspect (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	_ = cmd.MarkFlagRequired("cache-dir")
	return cmd
}
