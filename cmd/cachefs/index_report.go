package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/pkg/units"
)

// indexReport is what `cachefs index` prints: -o json and yaml encode it
// (snake_case keys), the table and -o wide are written from it.
type indexReport struct {
	Source         string           `json:"source"`
	Files          int              `json:"files"`
	Bytes          int64            `json:"bytes"`
	Dirs           int              `json:"dirs"`
	Skipped        int64            `json:"skipped_names"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
	Checksums      bool             `json:"checksums"`
	Manifests      []storedManifest `json:"manifests,omitempty"` // where the manifest was written
	Verify         *verifyReport    `json:"verify,omitempty"`    // --verify only
}

type storedManifest struct {
	Location string `json:"location"`
	Bytes    int64  `json:"bytes"`
}

// verifyReport is the drift --verify found.
type verifyReport struct {
	Manifest string         `json:"manifest"`
	Drift    bool           `json:"drift"`
	Missing  []string       `json:"missing"`
	New      []string       `json:"new"`
	Changed  []changeReport `json:"changed"`
	// LegacyPosixVersions counts the posix files of a manifest built before
	// versions held the ctime and inode: all show as changed.
	LegacyPosixVersions int `json:"legacy_posix_versions,omitempty"`
}

type changeReport struct {
	Path string `json:"path"`
	What string `json:"what"`
}

func (r indexReport) output() cliprint.Output {
	return cliprint.Output{Value: r, Table: r.table, Names: func() []string {
		var names []string
		for _, m := range r.Manifests {
			names = append(names, "manifest/"+m.Location)
		}
		if r.Verify != nil {
			names = append(names, "manifest/"+r.Verify.Manifest)
		}
		return names
	}}
}

// table writes the report for people; wide adds a row per figure.
func (r indexReport) table(w io.Writer, wide bool) error {
	el := time.Duration(r.ElapsedSeconds * float64(time.Second))
	rate := float64(r.Files) / max(r.ElapsedSeconds, 1e-9)
	fmt.Fprintf(w, "indexed %s: %d files, %s, %d directories, %d skipped names, in %s (%.0f files/s)\n",
		r.Source, r.Files, units.FormatSize(r.Bytes), r.Dirs, r.Skipped, el.Round(time.Millisecond), rate)
	if wide {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  files\t%d\n  bytes\t%d\n  directories\t%d\n  skipped names\t%d\n  seconds\t%.3f\n  checksums\t%v\n",
			r.Files, r.Bytes, r.Dirs, r.Skipped, r.ElapsedSeconds, r.Checksums)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, m := range r.Manifests {
		fmt.Fprintf(w, "manifest %s: %s (%.1f B/file), checksums: %v\n",
			m.Location, units.FormatSize(m.Bytes), float64(m.Bytes)/float64(max(r.Files, 1)), r.Checksums)
	}
	if v := r.Verify; v != nil {
		if v.LegacyPosixVersions > 0 {
			fmt.Fprintf(w, "note: %s was built before posix versions held the ctime and inode: its %d such files "+
				"all show as changed, and mounts refuse it; rebuild it\n", v.Manifest, v.LegacyPosixVersions)
		}
		writeDrift(w, v, wide)
	}
	return nil
}

// writeDrift lists the drift, maxDriftLines paths per kind (every one with
// wide).
func writeDrift(w io.Writer, v *verifyReport, wide bool) {
	limit := maxDriftLines
	if wide {
		limit = -1
	}
	list := func(kind string, n int, line func(i int) string) {
		for i := range n {
			if i == limit {
				fmt.Fprintf(w, "%s: … and %d more\n", kind, n-limit)
				break
			}
			fmt.Fprintf(w, "%s: %s\n", kind, line(i))
		}
	}
	list("missing", len(v.Missing), func(i int) string { return fmt.Sprintf("%q", v.Missing[i]) })
	list("new", len(v.New), func(i int) string { return fmt.Sprintf("%q", v.New[i]) })
	list("changed", len(v.Changed), func(i int) string { return fmt.Sprintf("%q (%s)", v.Changed[i].Path, v.Changed[i].What) })
	if !v.Drift {
		fmt.Fprintf(w, "verify %s: no drift\n", v.Manifest)
	}
}
