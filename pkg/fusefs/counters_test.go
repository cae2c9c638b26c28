package fusefs_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/pkg/fusefs"
)

// passthroughExpected reports whether this process can use FUSE passthrough:
// root (CAP_SYS_ADMIN) on a kernel ≥ 6.9.
func passthroughExpected() bool {
	if os.Geteuid() != 0 {
		return false
	}
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	parts := strings.SplitN(b.String(), ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major > 6 || major == 6 && minor >= 9
}

// TestCountersAndPassthrough checks the request counters, and that a cached
// whole file is read by the kernel without READ requests reaching this
// process when passthrough is possible.
func TestCountersAndPassthrough(t *testing.T) { eachMode(t, testCountersAndPassthrough) }

func testCountersAndPassthrough(t *testing.T, mode string) {
	src, files, _ := genDataset(t, 20)
	m := mountDir(t, mode, src, 1<<30, fusefs.Options{})
	before := fusefs.ReadCounters()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(m.dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != f.Size {
			t.Fatalf("%s: read %d bytes, want %d", f.Path, len(b), f.Size)
		}
	}
	after := fusefs.ReadCounters()
	if got := after.Opens - before.Opens; got != uint64(len(files)) {
		t.Errorf("opens counted %d, want %d", got, len(files))
	}
	if got := after.MemReads - before.MemReads; got != 0 {
		t.Errorf("%d reads from memory, want 0 (everything fits the cache)", got)
	}
	reads := after.CachedReads - before.CachedReads
	if passthroughExpected() {
		if reads != 0 || after.ReadBytes != before.ReadBytes {
			t.Errorf("passthrough not engaged: %d READ requests (%d bytes) on cached files reached the daemon",
				reads, after.ReadBytes-before.ReadBytes)
		}
	} else {
		t.Logf("no passthrough here (not root or kernel < 6.9): %d READ requests on cached files", reads)
	}
}
