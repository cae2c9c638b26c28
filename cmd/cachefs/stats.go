package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/peer"
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
			share, cluster, err := peer.ReadShare(dir)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if cluster {
					return enc.Encode(struct {
						cache.Info
						Peer peer.Share
					}{info, share})
				}
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
			if cluster {
				fmt.Fprintf(w, "cache scope\tcluster (peer %s of %d: %s)\n", share.Self, len(share.Peers), strings.Join(share.Peers, ", "))
				if share.Files > 0 {
					fmt.Fprintf(w, "owner share\t%.1f%% of the bytes, %d of %d files\n", 100*share.OwnedShare, share.OwnedFiles, share.Files)
				} else {
					fmt.Fprintf(w, "owner share\t%.1f%% (expected; no manifest)\n", 100*share.OwnedShare)
				}
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "cache-dir", "", "cache directory to inspect (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	_ = cmd.MarkFlagRequired("cache-dir")
	return cmd
}
