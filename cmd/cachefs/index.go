package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/internal/cliusage"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// exitDrift is the exit code of `index --verify` when the dataset drifted.
const exitDrift = 3

// maxDriftLines bounds the paths printed per kind of drift.
const maxDriftLines = 50

type indexConfig struct {
	source   string
	out      string // --out: the manifest's file or URL
	format   string // -o: the report's format (cliprint)
	upload   bool
	verify   string
	maxMem   units.Size // --manifest-max-memory, of --verify's manifest
	checksum bool
	workers  int
	progress string
}

func newIndexCmd(g *globalFlags) *cobra.Command {
	var c indexConfig
	cmd := &cobra.Command{
		Use:   "index SOURCE (--out FILE|URL | --upload | --verify FILE) [-o json|yaml|wide|name]",
		Short: "Build a dataset manifest, or check one against the dataset",
		Long: `Walk every directory of SOURCE (with --workers concurrent listings) and write a
manifest: the sorted list of every file with its size and version (and sha256
with --checksum). A mount with a manifest serves names and attributes without
listing the backend, and is ready in seconds even at millions of files.

--upload stores the manifest next to the dataset, at SOURCE/.epochfs/manifest
(a directory or an S3 prefix; with the same credentials as the listing), where
'cachefs mount', 'cachefs prefetch' and the CSI driver find it without
--manifest. --out writes a local file (atomically) or, given a URL
(s3://bucket/prefix/name?endpoint=…), that object; --out and --upload may
be combined. The .epochfs directory at the dataset root is never indexed.

--verify FILE compares FILE with the dataset now and lists files that are
missing, new, or changed (size, version, or sha256 when both sides have one);
it exits 3 when anything drifted, 0 when nothing did.

A progress bar is drawn on stderr on a terminal (plain lines every 5s
otherwise), then the report on stdout: files, bytes, directories, skipped
names, time, manifest size, drift; -o json or yaml prints it as one object
(snake_case keys), -o wide adds a row per figure, -o name prints
manifest/LOCATION per manifest written.
Names that would escape the mount (.., NUL, control characters, components
over 255 bytes) are skipped with a warning and counted.`,
		Example: `  cachefs index /data/imagenet --upload
  cachefs index 's3://datasets/imagenet?endpoint=http://127.0.0.1:9000' --upload --workers 64
  cachefs index 's3://datasets/imagenet?endpoint=http://127.0.0.1:9000' --out manifest --workers 64
  cachefs index /data/imagenet --verify /data/imagenet/.epochfs/manifest`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c.source = args[0]
			return runIndex(cmd.Context(), g, c, cmd.OutOrStdout(), os.Stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.out, "out", "", "write the manifest to this local `FILE`, or to the object a URL names")
	cliprint.AddFlag(cmd, &c.format, "a summary")
	f.BoolVar(&c.upload, "upload", false, "store the manifest next to the dataset, at SOURCE/.epochfs/manifest, where mounts find it")
	f.StringVar(&c.verify, "verify", "", "compare this manifest with the dataset and report drift (exit 3 on drift)")
	c.maxMem = units.Size(manifest.DefaultMaxMemory)
	f.Var(&c.maxMem, mountapi.FlagManifestMaxMemory, "with --verify: as for mount, the most memory that manifest may take, estimated from its header")
	f.BoolVar(&c.checksum, "checksum", false, "read every file and record its sha256 (compared by --verify when both have one)")
	f.IntVar(&c.workers, "workers", manifest.DefaultIndexWorkers, "concurrent directory listings (and file reads with --checksum)")
	f.StringVar(&c.progress, "progress", "auto", "progress display on stderr: auto (a bar on a terminal, plain lines otherwise), lines (a line every 5s; with --checksum, per 10% of the bytes summed), none")
	return cmd
}

func runIndex(ctx context.Context, g *globalFlags, c indexConfig, stdout, stderr io.Writer) error {
	log, err := g.logger()
	if err != nil {
		return err
	}
	if err := cliprint.Check(c.format); err != nil {
		if !strings.ContainsAny(c.format, "={}") {
			// -o wrote the manifest before it became the format.
			return cliusage.Errorf("index: -o %q is not an output format (json, yaml, wide, name): to write the manifest to %s, give --out %s", c.format, c.format, c.format)
		}
		return err
	}
	switch {
	case c.out == "" && !c.upload && c.verify == "":
		return cliusage.Errorf("index: give --out FILE (or URL) or --upload to write a manifest, or --verify FILE to check one")
	case (c.out != "" || c.upload) && c.verify != "":
		return cliusage.Errorf("index: --out/--upload and --verify are exclusive")
	case c.workers < 1:
		return fmt.Errorf("index: --workers %d: want at least 1", c.workers)
	case c.progress != "auto" && c.progress != "lines" && c.progress != "none":
		return fmt.Errorf("index: --progress %q: want auto, lines or none", c.progress)
	}
	var old *manifest.Manifest
	if c.verify != "" {
		if old, err = manifest.ReadFile(c.verify, c.maxMem.Bytes()); err != nil {
			return fmt.Errorf("index: --verify: %w", err)
		}
	}
	src, err := source.Parse(c.source)
	if err != nil {
		return err
	}
	bopts := backend.Options{Logger: log}
	b, err := all.Open(ctx, src, bopts)
	if err != nil {
		return err
	}
	defer b.Close()

	prog := &manifest.Progress{}
	stop := showProgress(stderr, c.progress, indexProgress(prog, c.checksum))
	m, st, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: c.workers, Checksum: c.checksum, Progress: prog, Logger: log})
	stop()
	if err != nil {
		return err
	}
	rep := indexReport{Source: src.String(), Files: st.Files, Bytes: st.Bytes, Dirs: st.Dirs, Skipped: st.Skipped,
		ElapsedSeconds: st.Elapsed.Seconds(), Checksums: c.checksum}
	if old != nil {
		d := manifest.Diff(old, m)
		rep.Verify = &verifyReport{Manifest: c.verify, Drift: !d.Empty(),
			Missing: append([]string{}, d.Missing...), New: append([]string{}, d.New...),
			LegacyPosixVersions: old.LegacyPosixVersions()}
		rep.Verify.Changed = make([]changeReport, len(d.Changed))
		for i, ch := range d.Changed {
			rep.Verify.Changed[i] = changeReport{ch.Path, ch.What}
		}
	} else {
		if err := storeManifest(ctx, b, bopts, c, m, &rep); err != nil {
			return err
		}
	}
	if err := cliprint.Print(stdout, c.format, rep.output()); err != nil {
		return err
	}
	if v := rep.Verify; v != nil && v.Drift {
		return &exitError{code: exitDrift, err: fmt.Errorf("verify %s: drift: %d missing, %d new, %d changed",
			v.Manifest, len(v.Missing), len(v.New), len(v.Changed))}
	}
	return nil
}

// storeManifest writes m where c says (--out, --upload) and records where
// in rep.
func storeManifest(ctx context.Context, b backend.Backend, bopts backend.Options, c indexConfig, m *manifest.Manifest, rep *indexReport) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}
	var locs []string
	if c.out != "" {
		locs = append(locs, c.out)
	}
	if c.upload {
		locs = append(locs, manifest.LocAuto)
	}
	for _, loc := range locs {
		where, err := manifest.Store(ctx, b, loc, bopts, data)
		if err != nil {
			return err
		}
		rep.Manifests = append(rep.Manifests, storedManifest{Location: where, Bytes: int64(len(data))})
	}
	return nil
}

// indexProgress is the state of an index for showProgress: a count while
// listing (the total is unknown), and the share of the listed bytes summed
// with --checksum.
func indexProgress(prog *manifest.Progress, checksum bool) func() progressState {
	start := time.Now()
	return func() progressState {
		el := time.Since(start)
		files := prog.Files.Load()
		st := progressState{Label: "listing", ETA: -1, Detail: fmt.Sprintf("%d dirs, %d files, %s, %.0f files/s, %s",
			prog.Dirs.Load(), files, units.FormatSize(prog.Bytes.Load()),
			float64(files)/max(el.Seconds(), 1e-9), el.Round(time.Second))}
		if checksum && prog.Summed.Load() > 0 {
			st.Label, st.Done, st.Total = "sha256", prog.SummedBytes.Load(), prog.Bytes.Load()
			st.Detail += fmt.Sprintf(" | sha256: %d/%d files, %s", prog.Summed.Load(), files, units.FormatSize(prog.SummedBytes.Load()))
		}
		return st
	}
}
