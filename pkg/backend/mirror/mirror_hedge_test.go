package mirror_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/mirror"
)

// stallOnce holds the next ranged GET it sees (any replica) until its
// request is canceled or 10s pass, and counts the cancellations.
type stallOnce struct {
	arm      atomic.Bool
	stalled  atomic.Int64
	canceled atomic.Int64
}

func (s *stallOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.Header.Get("Range") != "" && s.arm.CompareAndSwap(true, false) {
		s.stalled.Add(1)
		select {
		case <-req.Context().Done():
			s.canceled.Add(1)
			return nil, req.Context().Err()
		case <-time.After(10 * time.Second):
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

func sumStats(b backend.Backend) (s backend.ReplicaStat) {
	for _, r := range backend.ReplicaStats(b) {
		s.Requests += r.Requests
		s.Errors += r.Errors
		s.Hedges += r.Hedges
		s.HedgeWins += r.HedgeWins
		s.Served += r.Served
		s.Disagreements += r.Disagreements
	}
	return s
}

// TestMirrorHedgedRead: two S3 replicas (two buckets of one MinIO); the
// read sent first stalls; the hedge to the other replica answers, the
// stalled request is canceled, and the bytes are right.
func TestMirrorHedgedRead(t *testing.T) {
	m := s3.StartMinIO(t)
	a, b := m.NewBucket(t), m.NewBucket(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for _, bk := range []string{a, b} {
		m.Put(t, bk, "ds/f", data)
	}
	st := &stallOnce{}
	mb := backendtest.OpenOptions(t, "mirror:"+m.URL(a, "ds")+","+m.URL(b, "ds"), backend.Options{
		Credentials: backendtest.S3Credentials(&m.Server), Transport: st, Retry: backend.RetryPolicy{MaxAttempts: 1},
	})
	ctx := context.Background()
	e, err := mb.Stat(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	// Measure both replicas (p95 of recent reads, at least 20 ms).
	for i := range 40 {
		if _, err := mb.ReadAt(ctx, "f", e.Version, buf, int64(i*1000)); err != nil {
			t.Fatal(err)
		}
	}
	before := sumStats(mb)
	if before.Hedges != 0 {
		t.Logf("%d hedges while warming up (a slow machine)", before.Hedges)
	}
	st.arm.Store(true)
	for i := range buf {
		buf[i] = 0xff
	}
	start := time.Now()
	n, err := mb.ReadAt(ctx, "f", e.Version, buf, 5000)
	took := time.Since(start)
	if err != nil || n != len(buf) || !bytes.Equal(buf, data[5000:5000+len(buf)]) {
		t.Fatalf("hedged ReadAt = %d, %v (or wrong bytes)", n, err)
	}
	if took > 5*time.Second {
		t.Errorf("hedged read took %v; the stalled replica was waited for", took)
	}
	after := sumStats(mb)
	if st.stalled.Load() != 1 || after.Hedges-before.Hedges != 1 || after.HedgeWins-before.HedgeWins != 1 {
		t.Errorf("stalled %d, hedges +%d, hedge wins +%d; want 1, 1, 1", st.stalled.Load(),
			after.Hedges-before.Hedges, after.HedgeWins-before.HedgeWins)
	}
	if after.Errors != 0 {
		t.Errorf("%d replica errors; a canceled loser is not an error", after.Errors)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.canceled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st.canceled.Load() != 1 {
		t.Errorf("the losing request was not canceled")
	}
	t.Logf("hedged read took %v (stalled replica canceled)", took.Round(time.Millisecond))
}

// TestMirrorDisagreement: a replica with another size, or the same size
// and other bytes than the manifest's sha256, never serves that file; one
// log line per replica and file, however many reads.
func TestMirrorDisagreement(t *testing.T) {
	good := []byte("the dataset's bytes")
	for _, tc := range []struct {
		name, other string
		sums        bool
	}{
		{"size", "other bytes, another size", false},
		{"checksum", "THE DATASET'S BYTES", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := t.TempDir(), t.TempDir()
			backendtest.WriteFiles(t, a, map[string][]byte{"f": good, "g": good})
			backendtest.WriteFiles(t, b, map[string][]byte{"f": []byte(tc.other), "g": good})
			var logs bytes.Buffer
			mb := backendtest.OpenOptions(t, "mirror:"+a+","+b, backend.Options{Logger: backendtest.Logger(&logs)})
			if tc.sums {
				want := sha256.Sum256(good)
				if !backend.SetChecksums(mb, func(string) []byte { return want[:] }) {
					t.Fatal("SetChecksums found no mirror")
				}
			}
			ctx := context.Background()
			versions := map[string]string{}
			for _, p := range []string{"f", "g"} {
				e, err := mb.Stat(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				versions[p] = e.Version
			}
			for i := range 30 {
				for _, p := range []string{"f", "g"} {
					buf := make([]byte, len(good))
					n, err := mb.ReadAt(ctx, p, versions[p], buf, 0)
					if (err != nil && n != len(good)) || !bytes.Equal(buf[:n], good) {
						t.Fatalf("read %d of %s = %d, %v, %q; want the dataset's bytes", i, p, n, err, buf[:n])
					}
				}
			}
			if c := strings.Count(logs.String(), "mirror replica disagrees"); c != 1 {
				t.Errorf("%d disagreement log lines, want 1:\n%s", c, logs.String())
			}
			if !strings.Contains(logs.String(), "replica=1") || !strings.Contains(logs.String(), `path="\"f\""`) {
				t.Errorf("the log line does not name replica 1 and file f:\n%s", logs.String())
			}
			st := backend.ReplicaStats(mb)
			if st[1].Disagreements != 1 || st[0].Disagreements != 0 {
				t.Errorf("disagreements = %d, %d; want 0, 1", st[0].Disagreements, st[1].Disagreements)
			}
			if st[1].Served == 0 {
				t.Errorf("replica 1 served nothing: the file it agrees on (g) should still be read from it")
			}
		})
	}
}

// slowBucket delays every request for one bucket while on.
type slowBucket struct {
	bucket string
	delay  time.Duration
	on     atomic.Bool
}

func (s *slowBucket) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.on.Load() && strings.HasPrefix(req.URL.Path, "/"+s.bucket+"/") {
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(s.delay):
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestMirrorSlowReplicaComesBack: a replica slowed for a while loses the
// reads to the other one, and gets them back once it is fast again and its
// old measure has expired (it is probed again).
func TestMirrorSlowReplicaComesBack(t *testing.T) {
	t.Cleanup(mirror.SetRemeasure(300 * time.Millisecond))
	m := s3.StartMinIO(t)
	a, b := m.NewBucket(t), m.NewBucket(t)
	data := bytes.Repeat([]byte("x"), 8192)
	for _, bk := range []string{a, b} {
		m.Put(t, bk, "ds/f", data)
	}
	sb := &slowBucket{bucket: a, delay: 40 * time.Millisecond}
	mb := backendtest.OpenOptions(t, "mirror:"+m.URL(a, "ds")+","+m.URL(b, "ds"), backend.Options{
		Credentials: backendtest.S3Credentials(&m.Server), Transport: sb,
	})
	ctx := context.Background()
	e, err := mb.Stat(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	read := func(k int) (a0 int64) {
		before := backend.ReplicaStats(mb)[0].Served
		buf := make([]byte, 1000)
		for i := range k {
			if _, err := mb.ReadAt(ctx, "f", e.Version, buf, int64(i%8)*1000); err != nil {
				t.Fatal(err)
			}
		}
		return backend.ReplicaStats(mb)[0].Served - before
	}
	sb.on.Store(true)
	read(20) // both measured: replica 0 is slow
	if got := read(40); got > 4 {
		t.Errorf("the slow replica served %d of 40 reads", got)
	}
	sb.on.Store(false)
	time.Sleep(400 * time.Millisecond) // its measure expires
	if got := read(60); got == 0 {
		t.Errorf("replica 0, fast again, served none of 60 reads: never measured again")
	}
}
