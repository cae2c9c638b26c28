package cache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// holdWriters takes every background-writer slot of s, so that entries
// written behind stay pending until the returned func gives them back.
func holdWriters(s *Store) (release func()) {
	for range cap(s.writers) {
		s.writers <- struct{}{}
	}
	return func() {
		for range cap(s.writers) {
			<-s.writers
		}
	}
}

// waitAdmissions waits until s has admitted n entries.
func waitAdmissions(t *testing.T, s *Store, n int64) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Stats()
		if st.Admissions >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d admissions after 10 s, want %d: %+v", st.Admissions, n, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriteBehind: a miss is served from memory while its entry is written
// in the background; a Get meanwhile is a hit on the same bytes, with no
// second load; nothing is counted as admitted and no entry file exists
// until the write is done; then the entry is a plain, verified hit.
func TestWriteBehind(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 1 << 20, WriteBehind: 1 << 20})
	release := holdWriters(s)
	k := key("f")
	var ld countingLoader
	r1 := mustGet(t, s, k, 5000, ld.load(k))
	if r1.File != nil || r1.Hit || !r1.WriteBehind {
		t.Fatalf("miss: File=%v Hit=%v WriteBehind=%v, want Data written behind", r1.File, r1.Hit, r1.WriteBehind)
	}
	checkBytes(t, k, r1.Data, 5000)
	r2 := mustGet(t, s, k, 5000, failLoader(t))
	if r2.File != nil || !r2.Hit || !r2.WriteBehind {
		t.Fatalf("Get while written: File=%v Hit=%v WriteBehind=%v, want a hit on the pending bytes", r2.File, r2.Hit, r2.WriteBehind)
	}
	checkBytes(t, k, r2.Data, 5000)
	st := s.Stats()
	if st.Admissions != 0 || st.Entries != 0 || st.UsedBytes != 5000 || st.Hits != 1 || st.Misses != 1 || st.WrittenBehind != 0 || st.WritesPending != 1 {
		t.Fatalf("Stats while pending: %+v", st)
	}
	if files := listFiles(t, dir); len(files) != 0 {
		t.Fatalf("files while the write waits: %v", files)
	}
	if s.Contains(k) {
		t.Fatal("Contains: true before the entry is written")
	}

	release()
	st = waitAdmissions(t, s, 1)
	if st.WrittenBehind != 1 || st.Entries != 1 || st.UsedBytes != 5000 || st.WriteErrors != 0 || st.Rejections != 0 || st.WritesPending != 0 {
		t.Fatalf("Stats once written: %+v", st)
	}
	// The first holds still read their bytes, whoever reuses buffers now.
	for i := range 8 {
		other := key("other" + string(rune('a'+i)))
		readResult(t, mustGet(t, s, other, 5000, ld.load(other)))
	}
	checkBytes(t, k, r1.Data, 5000)
	checkBytes(t, k, r2.Data, 5000)
	r1.Release()
	r2.Release()
	r1.Release() // idempotent

	r3 := mustGet(t, s, k, 5000, failLoader(t))
	if r3.File == nil || !r3.Hit || r3.WriteBehind {
		t.Fatalf("Get once written: File=%v Hit=%v WriteBehind=%v, want a file hit", r3.File, r3.Hit, r3.WriteBehind)
	}
	checkBytes(t, k, readResult(t, r3), 5000)
	if got := ld.calls.Load(); got != 9 {
		t.Fatalf("loads: %d, want 9 (one per key)", got)
	}
	// The entry is an ordinary one: it survives a reopen, verified.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	checkBytes(t, k, readResult(t, mustGet(t, s2, k, 5000, failLoader(t))), 5000)
	if st := s2.Stats(); st.CorruptDropped != 0 || st.Hits != 1 {
		t.Fatalf("reopened: %+v", st)
	}
}

// TestWriteBehindBudget: past Options.WriteBehind bytes pending, a miss
// writes its entry before Get returns (a file, as without write-behind):
// nothing is dropped.
func TestWriteBehindBudget(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20, WriteBehind: 6000})
	release := holdWriters(s)
	var ld countingLoader
	a, b := key("a"), key("b")
	ra := mustGet(t, s, a, 5000, ld.load(a))
	if !ra.WriteBehind {
		t.Fatal("first miss not written behind")
	}
	rb := mustGet(t, s, b, 5000, ld.load(b))
	if rb.File == nil || rb.WriteBehind {
		t.Fatalf("miss past the budget: File=%v WriteBehind=%v, want the file written first", rb.File, rb.WriteBehind)
	}
	checkBytes(t, b, readResult(t, rb), 5000)
	if st := s.Stats(); st.Admissions != 1 || st.WrittenBehind != 0 || st.UsedBytes != 10_000 {
		t.Fatalf("Stats: %+v", st)
	}
	release()
	if st := waitAdmissions(t, s, 2); st.WrittenBehind != 1 || st.Entries != 2 {
		t.Fatalf("Stats once written: %+v", st)
	}
	checkBytes(t, a, ra.Data, 5000)
	ra.Release()
}

// TestWriteBehindCloseWaits: Close returns only once pending entries are
// written, and a reopened store serves them (verified, not torn).
func TestWriteBehindCloseWaits(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Capacity: 1 << 20, WriteBehind: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriters(s)
	k := key("f")
	var ld countingLoader
	r := mustGet(t, s, k, 70_000, ld.load(k))
	if !r.WriteBehind {
		t.Fatal("not written behind")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a write pending", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	r.Release()
	s2 := testStore(t, Options{Dir: dir, Capacity: 1 << 20})
	checkBytes(t, k, readResult(t, mustGet(t, s2, k, 70_000, failLoader(t))), 70_000)
	if st := s2.Stats(); st.CorruptDropped != 0 || st.Entries != 1 {
		t.Fatalf("reopened: %+v", st)
	}
}

// TestWriteBehindFill: a Fill of an entry being written waits for the
// write and reports it cached, without loading it again; Fills themselves
// never write behind.
func TestWriteBehindFill(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20, WriteBehind: 1 << 20})
	release := holdWriters(s)
	k := key("f")
	var ld countingLoader
	r := mustGet(t, s, k, 5000, ld.load(k))
	done := make(chan FillResult, 1)
	go func() {
		fr, err := s.Fill(context.Background(), k, 5000, failLoader(t))
		if err != nil {
			t.Errorf("Fill: %v", err)
		}
		done <- fr
	}()
	select {
	case fr := <-done:
		t.Fatalf("Fill returned %+v while the entry's write waits", fr)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if fr := <-done; !fr.Cached || fr.Prefetched {
		t.Fatalf("Fill: %+v, want cached, not a prefetch fill", fr)
	}
	r.Release()
	// A Fill of a new key writes its file before returning.
	k2 := key("g")
	if fr, err := s.Fill(context.Background(), k2, 5000, ld.load(k2)); err != nil || !fr.Cached || !fr.Prefetched {
		t.Fatalf("Fill: %+v %v", fr, err)
	}
	if !s.Contains(k2) {
		t.Fatal("Fill returned before its entry was written")
	}
	if st := s.Stats(); st.PrefetchFills != 1 || st.Admissions != 2 || st.WrittenBehind != 1 || ld.calls.Load() != 2 {
		t.Fatalf("Stats: %+v, loads %d", st, ld.calls.Load())
	}
}

// TestWriteBehindFailure: a background write that fails is a write error;
// the reader already has its bytes; the entry is forgotten and its room
// released, and the next Get loads it again.
func TestWriteBehindFailure(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 1 << 20, WriteBehind: 1 << 20})
	k := key("f")
	breakShard(t, dir, k)
	var ld countingLoader
	r := mustGet(t, s, k, 5000, ld.load(k))
	if !r.WriteBehind {
		t.Fatal("not written behind")
	}
	checkBytes(t, k, r.Data, 5000)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().WriteErrors == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no write error after 10 s: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	checkBytes(t, k, r.Data, 5000)
	r.Release()
	if st := s.Stats(); st.Admissions != 0 || st.UsedBytes != 0 || st.Entries != 0 || st.WrittenBehind != 0 {
		t.Fatalf("Stats: %+v", st)
	}
	r2 := mustGet(t, s, k, 5000, ld.load(k))
	checkBytes(t, k, readResult(t, r2), 5000)
	r2.Release()
	if got := ld.calls.Load(); got != 2 {
		t.Fatalf("loads: %d, want 2", got)
	}
}

// TestWriteBehindConcurrent: many readers of a few keys with small
// budgets: every Get returns the key's bytes, one load per key, and every
// entry ends up written and verified on disk (run with -race).
func TestWriteBehindConcurrent(t *testing.T) {
	dir := t.TempDir()
	s := testStore(t, Options{Dir: dir, Capacity: 1 << 30, WriteBehind: 200_000})
	const keys, readers = 40, 16
	var ld countingLoader
	errs := make(chan error, readers)
	for g := range readers {
		go func() {
			for i := range keys {
				k := key(string(rune('A' + (i+g)%keys)))
				size := int64(10_000 + 997*((i+g)%keys))
				r, err := s.Get(context.Background(), k, size, ld.load(k))
				if err != nil {
					errs <- err
					return
				}
				var got []byte
				if r.File != nil {
					got, err = readAll(r.File)
					r.File.Close()
					if err != nil {
						errs <- err
						return
					}
				} else {
					got = bytes.Clone(r.Data)
				}
				r.Release()
				if !bytes.Equal(got, content(k, size)) {
					errs <- os.ErrInvalid
					return
				}
			}
			errs <- nil
		}()
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := waitAdmissions(t, s, keys)
	if st.Entries != keys || ld.calls.Load() != keys || st.Hits+st.Misses != keys*readers {
		t.Fatalf("Stats: %+v, loads %d", st, ld.calls.Load())
	}
	for i := range keys {
		k := key(string(rune('A' + i)))
		if _, err := verifyEntry(s.dataPath(k.id())); err != nil {
			t.Fatalf("entry %s: %v", k, err)
		}
	}
}

func readAll(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

// TestWriteBehindHold: a Hold keeps the bytes of a written-behind Result
// after the Result's own Release and after the write (no reuse of the
// buffer until the hold is released); other Results have nothing to hold.
func TestWriteBehindHold(t *testing.T) {
	s := testStore(t, Options{Capacity: 1 << 20, WriteBehind: 1 << 20})
	var ld countingLoader
	// A background write may finish and release its bytes before Get takes
	// its hold (Get then returns the written file, as documented): try new
	// keys until one comes back written behind.
	var k Key
	var r Result
	for i := 0; ; i++ {
		k = key(fmt.Sprintf("f%d", i))
		r = mustGet(t, s, k, 5000, ld.load(k))
		if r.WriteBehind {
			break
		}
		if i == 100 {
			t.Fatal("100 misses in a row were written before Get returned: none came back written behind")
		}
		readResult(t, r)
	}
	held, ok := r.Hold()
	if !ok {
		t.Fatalf("Hold of a written-behind Result: %v", ok)
	}
	r.Release()
	if _, ok := r.Hold(); ok {
		t.Fatal("Hold after Release succeeded")
	}
	waitAdmissions(t, s, 1)
	for i := range 8 { // these take pooled buffers of the same class
		other := key("other" + string(rune('a'+i)))
		readResult(t, mustGet(t, s, other, 5000, ld.load(other)))
	}
	checkBytes(t, k, held.Data, 5000)
	held.Release()
	hit := mustGet(t, s, k, 5000, failLoader(t))
	if _, ok := hit.Hold(); ok {
		t.Fatal("Hold of a file Result succeeded")
	}
	readResult(t, hit)
}
