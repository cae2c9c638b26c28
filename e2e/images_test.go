package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv/cluster"
)

// TestImagesRun imports the images `make images` wrote into a throw-away
// containerd and runs them with `ctr run`: the epochfs image's binaries
// print the version they were built with, fusermount3 and the CA bundle are
// there; the test-reader reads a bind-mounted dataset twice and prints the
// sha256 of every file.
func TestImagesRun(t *testing.T) {
	requireE2E(t)
	epochfsTar, epochfsRef := imageArchive(t, "epochfs")
	readerTar, readerRef := imageArchive(t, "test-reader")
	c := cluster.StartContainerd(t)
	for _, tarPath := range []string{epochfsTar, readerTar} {
		start := time.Now()
		names, err := c.Import(tarPath)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("imported %v from %s in %.1fs\n", names, filepath.Base(tarPath), time.Since(start).Seconds())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tag := epochfsRef[strings.LastIndex(epochfsRef, ":")+1:]

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"csi-driver", "--version"}, "csi-driver " + tag + "\n"},
		{[]string{"job-controller", "--version"}, "job-controller " + tag + "\n"},
		{[]string{"cachefs", "version"}, "cachefs " + tag + " ("},
		// Built with the ceph tag, its libcephfs2 found in the image.
		{[]string{"cachefs", "version"}, "sources: posix, s3, nfs, mirror, cephfs (libcephfs)\n"},
		{[]string{"cachefs-job", "--help"}, "Usage:"},
		{[]string{"fusermount3", "-V"}, "fusermount3 version: 3."},
		{[]string{"sh", "-c", "test -s /etc/ssl/certs/ca-certificates.crt && id -u && pwd"}, "0\n/\n"},
	} {
		out, err := c.Run(ctx, epochfsRef, nil, tc.args...)
		if err != nil {
			t.Errorf("%v: %v: %s", tc.args, err, out)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("%v: output %q, want %q in it", tc.args, out, tc.want)
		}
	}

	data := t.TempDir()
	contents := map[string]string{"a.bin": "alpha", "d/b.bin": strings.Repeat("beta", 10000)}
	var names []string
	for name, s := range contents {
		p := filepath.Join(data, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	mount := []string{"--mount", "type=bind,src=" + data + ",dst=/data,options=rbind:ro"}
	out, err := c.Run(ctx, readerRef, mount, "read-dataset", "/data")
	if err != nil {
		t.Fatalf("read-dataset: %v: %s", err, out)
	}
	var want strings.Builder
	for pass := 1; pass <= 2; pass++ {
		fmt.Fprintf(&want, "pass %d\n", pass)
		for _, n := range names {
			sum := sha256.Sum256([]byte(contents[n]))
			fmt.Fprintf(&want, "%s  /data/%s\n", hex.EncodeToString(sum[:]), n)
		}
	}
	want.WriteString("done\n")
	if out != want.String() {
		t.Fatalf("read-dataset output\n%s\nwant\n%s", out, want.String())
	}
}
