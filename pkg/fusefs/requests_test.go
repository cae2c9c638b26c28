package fusefs_test

import (
	"context"
	"io"
	"log"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
)

// The FUSE requests a warm open costs: what bench/warmprofile measured
// (bench/RESULTS.md, "Warm epoch: where the time goes"). A DataLoader worker
// opens each cached file once per epoch, fstat's it and reads it to the end;
// on 2 cores every request that reaches the mount is CPU the decoder lacks.
// Once a file's entry is known and its bytes are cached, that open reaches
// this process as exactly OPEN and RELEASE: no LOOKUP (the kernel keeps the
// entry for an hour), no GETATTR (nor the attributes), no FLUSH at close
// (FOPEN_NOFLUSH), and with passthrough no READ. (Python's open() also makes
// an isatty() ioctl, a FUSE_IOCTL the kernel sends every time whatever the
// daemon answers; this test makes none.)

// rxRequest matches go-fuse's debug line of a request ("rx 12: OPEN n5 …")
// and of each entry of a batch forget.
var rxRequest = regexp.MustCompile(`rx \d+(?: \d+/\d+)?: ([A-Z_]+)`)

// entryTimeouts matches the node id and the entry and attribute timeouts
// of a LOOKUP reply.
var entryTimeouts = regexp.MustCompile(`\{n(\d+) g\d+ tE=(\S+)s tA=(\S+)s`)

// epollHackNode is the node of go-fuse's own ".go-fuse-epoll-hack" file,
// looked up at mount time with zero timeouts: not a dataset file.
const epollHackNode = "18446744073709551615"

func TestWarmOpenRequests(t *testing.T) { eachMode(t, testWarmOpenRequests) }

func testWarmOpenRequests(t *testing.T, mode string) {
	testenv.RequireFUSE(t)
	src, files, _ := genDataset(t, 20)
	var logs testenv.SyncBuffer
	mnt := mountDebug(t, mode, src, &logs)

	// Priming pass: the lookups and the misses that fill the cache.
	for _, f := range files {
		if _, err := os.ReadFile(filepath.Join(mnt, f.Path)); err != nil {
			t.Fatal(err)
		}
	}
	primed := settled(&logs, "")
	checkEntryTimeouts(t, primed)
	n := len(files)
	if got := countRequests(primed)["LOOKUP"]; got < n {
		t.Fatalf("priming pass: %d LOOKUPs for %d files: the request log is not what this test reads", got, n)
	}

	// The warm pass, as a loader's worker reads a file.
	for _, f := range files {
		fh, err := os.Open(filepath.Join(mnt, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Stat(); err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(fh); err != nil || int64(len(b)) != f.Size {
			t.Fatalf("%s: read %d bytes (%v), want %d", f.Path, len(b), err, f.Size)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	warm := countRequests(strings.TrimPrefix(settled(&logs, primed), primed))
	want := map[string]int{"OPEN": n, "RELEASE": n}
	if !passthroughExpected() && warm["READ"] > 0 {
		want["READ"] = warm["READ"] // the kernel reads through this process: counted by TestCountersAndPassthrough
	}
	if !maps.Equal(warm, want) {
		t.Errorf("warm pass over %d cached files: requests %v, want %v", n, warm, want)
	}
}

// mountDebug mounts src with go-fuse's request log on, written to logs
// (go-fuse logs through the log package's default logger).
func mountDebug(t *testing.T, mode, src string, logs io.Writer) string {
	t.Helper()
	b := openDir(t, src)
	opts := fusefs.Options{Backend: b}
	if mode == modeManifest {
		man, _, err := manifest.Index(context.Background(), b, manifest.IndexOptions{Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		opts.Manifest = man
	}
	prev, flags := log.Writer(), log.Flags()
	log.SetOutput(logs)
	log.SetFlags(0)
	t.Cleanup(func() { log.SetOutput(prev); log.SetFlags(flags) }) // after the unmount: cleanups run last first
	mnt, _, _ := mountFSWith(t, opts, 1<<30, b, fusefs.MountOptions{FsName: "test", Debug: true})
	return mnt
}

// settled returns the request log once every OPEN logged after prefix has
// had its RELEASE, which the kernel sends after close returns (or after 30
// s, to fail on the counts).
func settled(logs *testenv.SyncBuffer, prefix string) string {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s := logs.String()
		c := countRequests(strings.TrimPrefix(s, prefix))
		if c["RELEASE"] >= c["OPEN"] || time.Now().After(deadline) {
			return s
		}
	}
}

func countRequests(logs string) map[string]int {
	counts := map[string]int{}
	for _, m := range rxRequest.FindAllStringSubmatch(logs, -1) {
		counts[m[1]]++
	}
	return counts
}

// checkEntryTimeouts checks that every LOOKUP reply in logs gives the
// kernel at least an hour for the entry and its attributes: the dataset is
// immutable while mounted (docs/DESIGN.md), and a shorter timeout is a
// LOOKUP or GETATTR per file per epoch once it has passed.
func checkEntryTimeouts(t *testing.T, logs string) {
	t.Helper()
	replies := entryTimeouts.FindAllStringSubmatch(logs, -1)
	if len(replies) == 0 {
		t.Fatal("no entry replies in the request log")
	}
	for _, m := range replies {
		if m[1] == epollHackNode {
			continue
		}
		for i, name := range []string{"entry", "attribute"} {
			d, err := time.ParseDuration(m[i+2] + "s")
			if err != nil || d < time.Hour {
				t.Fatalf("%s timeout %ss in %q, want at least an hour", name, m[i+2], m[0])
			}
		}
	}
}
