package backend_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/fakes3"
	"github.com/epochfs/epochfs/internal/testenv/nfs"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

// recordingMemory is a ListMemory that remembers the most it held.
type recordingMemory struct {
	backend.ListMemory
	used, peak atomic.Int64
}

func (m *recordingMemory) Reserve(n int64) bool {
	if !m.ListMemory.Reserve(n) {
		return false
	}
	u := m.used.Add(n)
	for p := m.peak.Load(); u > p && !m.peak.CompareAndSwap(p, u); p = m.peak.Load() {
	}
	return true
}

func (m *recordingMemory) Release(n int64) {
	m.used.Add(-n)
	m.ListMemory.Release(n)
}

func limited(lim backend.ListLimits) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = cancel // released with the test process; a cap ends every listing here well before
	return backend.WithListLimits(ctx, lim)
}

// wantCap checks that err is the *ListLimitError of cap for dir.
func wantCap(t *testing.T, err error, dir, cap string) {
	t.Helper()
	var lim *backend.ListLimitError
	if !errors.As(err, &lim) || !errors.Is(err, backend.ErrListTooLarge) {
		t.Fatalf("List(%q) = %v, want a *ListLimitError of %s", dir, err, cap)
	}
	if lim.Cap != cap || lim.Path != dir {
		t.Fatalf("List(%q) refused by %s for %q, want %s: %v", dir, lim.Cap, lim.Path, cap, err)
	}
}

// TestS3ListCaps: an S3 server answering endless truncated listings (pages
// full of new keys, or empty) is stopped by each cap, early (few pages past
// it), with no retry and every reserved byte given back; an ordinary
// directory lists as before. Without the caps, List gathers the server's
// whole backstop (200,000 keys here) and returns them.
func TestS3ListCaps(t *testing.T) {
	s := &fakes3.Server{Bucket: "data", Objects: map[string][]byte{"ok/a": []byte("a"), "ok/b": []byte("bb")},
		Endless: []string{"endless/"}, EmptyPages: []string{"empty/"}, Backstop: 200_000}
	s.Start(t)
	src, err := source.Parse(s.Source())
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, backend.Options{Credentials: backend.Credentials{AccessKey: "k", SecretKey: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	t.Run("entries", func(t *testing.T) {
		before := s.Pages("endless/")
		mem := &recordingMemory{ListMemory: backend.NewListMemory(1 << 30)}
		_, err := b.List(limited(backend.ListLimits{MaxEntries: 5000, MaxPages: 1000, Memory: mem}), "endless")
		wantCap(t, err, "endless", backend.CapDirEntries)
		if n := s.Pages("endless/") - before; n > 6 {
			t.Errorf("%d pages fetched for a cap of 5,000 entries in pages of 1,000; want at most 6", n)
		}
		if u := mem.used.Load(); u != 0 {
			t.Errorf("%d bytes still reserved after List returned", u)
		}
		if p := mem.peak.Load(); p < 5000*backend.ListEntryCost("x", "") || p > 8<<20 {
			t.Errorf("peak reservation %d bytes, want about 5,000 entries' worth", p)
		}
	})
	t.Run("memory", func(t *testing.T) {
		mem := &recordingMemory{ListMemory: backend.NewListMemory(1 << 20)}
		_, err := b.List(limited(backend.ListLimits{MaxEntries: 1 << 20, Memory: mem}), "endless")
		wantCap(t, err, "endless", backend.CapListingMemory)
		if p := mem.peak.Load(); p > 1<<20 {
			t.Errorf("peak reservation %d bytes over the 1 MiB budget", p)
		}
		if u := mem.used.Load(); u != 0 {
			t.Errorf("%d bytes still reserved after List returned", u)
		}
	})
	t.Run("empty pages", func(t *testing.T) {
		before := s.Pages("empty/")
		_, err := b.List(limited(backend.ListLimits{MaxEntries: 1 << 20, MaxPages: 50}), "empty")
		wantCap(t, err, "empty", backend.CapListingPages)
		if n := s.Pages("empty/") - before; n != 50 {
			t.Errorf("%d pages fetched, want exactly the cap of 50", n)
		}
	})
	t.Run("probe of empty pages", func(t *testing.T) {
		// Stat of a name that is no object asks for one key under name/:
		// endless empty pages stop at the probe's own cap, whatever the
		// caller's limits (none here).
		before := s.Pages("empty/")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := b.Stat(ctx, "empty")
		wantCap(t, err, "empty/", backend.CapProbePages)
		if n := s.Pages("empty/") - before; n != 100 {
			t.Errorf("%d probe requests, want exactly the cap of 100", n)
		}
	})
	t.Run("ordinary directory", func(t *testing.T) {
		es, err := b.List(limited(backend.ListLimits{MaxEntries: 2, MaxPages: 1, Memory: backend.NewListMemory(1 << 20)}), "ok")
		if err != nil || len(es) != 2 {
			t.Fatalf("List(ok) = %v, %v; want a and b", es, err)
		}
		es, err = b.List(limited(backend.ListLimits{MaxEntries: 3}), "")
		if err != nil || len(es) != 3 {
			t.Fatalf("List(root) = %v, %v; want empty, endless and ok", es, err)
		}
	})
}

// TestMirrorListCapNoFailover: a replica's listing over a cap is the
// answer (the other replica would hold the same directory): no failover.
func TestMirrorListCapNoFailover(t *testing.T) {
	var srv [2]*fakes3.Server
	for i := range srv {
		srv[i] = &fakes3.Server{Bucket: "data", Endless: []string{"endless/"}, Backstop: 100_000}
		srv[i].Start(t)
	}
	b := backendtest.OpenOptions(t, "mirror:"+srv[0].Source()+","+srv[1].Source(),
		backend.Options{Credentials: backend.Credentials{AccessKey: "k", SecretKey: "s"}, Lazy: true})
	_, err := b.List(limited(backend.ListLimits{MaxEntries: 2000}), "endless")
	wantCap(t, err, "endless", backend.CapDirEntries)
	if n := srv[1].Pages("endless/"); n != 0 {
		t.Errorf("replica 1 got %d list requests after replica 0 passed a cap; want none", n)
	}
}

// TestPosixListCaps: a local directory over the entry or memory cap is
// refused, and every reserved byte given back.
func TestPosixListCaps(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		if err := os.WriteFile(filepath.Join(dir, "big", fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := backendtest.OpenOptions(t, dir, backend.Options{})
	mem := &recordingMemory{ListMemory: backend.NewListMemory(1 << 30)}
	_, err := b.List(limited(backend.ListLimits{MaxEntries: 1000, Memory: mem}), "big")
	wantCap(t, err, "big", backend.CapDirEntries)
	_, err = b.List(limited(backend.ListLimits{MaxEntries: 1 << 20, Memory: mem}), "big")
	if err != nil {
		t.Fatalf("List(big) under the caps: %v", err)
	}
	_, err = b.List(limited(backend.ListLimits{Memory: backend.NewListMemory(64 << 10)}), "big")
	wantCap(t, err, "big", backend.CapListingMemory)
	if u := mem.used.Load(); u != 0 {
		t.Errorf("%d bytes still reserved after List returned", u)
	}
}

// TestNFSListCaps: the READDIRPLUS loop stops at the entry cap and at the
// page cap (go-nfs server over a local directory of 3,000 files, replies
// of at most 64 KiB of directory data: several pages).
func TestNFSListCaps(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		name := fmt.Sprintf("f%05d-%s", i, "padding-padding-padding-padding-padding")
		if err := os.WriteFile(filepath.Join(dir, "big", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := backendtest.OpenOptions(t, nfs.StartGoNFS(t, dir, 4096).URL, backend.Options{})
	mem := &recordingMemory{ListMemory: backend.NewListMemory(1 << 30)}
	_, err := b.List(limited(backend.ListLimits{MaxEntries: 1000, Memory: mem}), "big")
	wantCap(t, err, "big", backend.CapDirEntries)
	_, err = b.List(limited(backend.ListLimits{MaxEntries: 1 << 20, MaxPages: 1}), "big")
	wantCap(t, err, "big", backend.CapListingPages)
	es, err := b.List(limited(backend.ListLimits{MaxEntries: 3000, MaxPages: 1000, Memory: mem}), "big")
	if err != nil || len(es) != 3000 {
		t.Fatalf("List(big) under the caps: %d entries, %v", len(es), err)
	}
	if u := mem.used.Load(); u != 0 {
		t.Errorf("%d bytes still reserved after List returned", u)
	}
}
