package peer

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// peerGet sends one read request by hand to addr with group's header and
// auth as its bearer credential, and returns the status.
func peerGet(t *testing.T, addr, group, auth, version string) int {
	t.Helper()
	q := url.Values{"dataset": {"ds"}, "path": {"a/b.jpg"}, "version": {version}, "size": {"1000"}, "off": {"0"}, "len": {"10"}}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+ReadPath+"?"+q.Encode(), nil)
	if group != "" {
		req.Header.Set(HeaderGroup, group)
	}
	req.Header.Set("Authorization", "Bearer "+auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServerRefusesOtherGroups: a server serves its own group only. With
// the right shared token, a request naming another group with that group's
// key (another tenant's mount of the same source, a stale entry) is 403,
// and nothing is read; the bare token, a key of one group presented for
// another, or no group at all is 401. On the code before groups, the
// bearer token alone with dataset=ds read the file (200).
func TestServerRefusesOtherGroups(t *testing.T) {
	fr := &fakeReader{}
	sm := NewMetrics()
	srv := httptest.NewServer(NewServer(ServerOptions{Dataset: "ds", Group: "g-tenant-a", Token: token, Reader: fr, Metrics: sm}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	keyA, keyB := hex.EncodeToString(GroupKey(token, "g-tenant-a")), hex.EncodeToString(GroupKey(token, "g-tenant-b"))
	for _, tc := range []struct {
		name, group, auth string
		want              int
	}{
		{"another group, its own key", "g-tenant-b", keyB, http.StatusForbidden},
		{"another group, this group's key", "g-tenant-b", keyA, http.StatusUnauthorized},
		{"this group, another group's key", "g-tenant-a", keyB, http.StatusUnauthorized},
		{"this group, the bare token", "g-tenant-a", string(token), http.StatusUnauthorized},
		{"no group, this group's key", "", keyA, http.StatusUnauthorized},
		{"a malformed group", "g tenant a", keyA, http.StatusUnauthorized},
	} {
		if got := peerGet(t, addr, tc.group, tc.auth, "v1"); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if n := fr.calls.Load(); n != 0 {
		t.Fatalf("refused requests read %d times, want 0", n)
	}
	if got := testutil.ToFloat64(sm.Refused.WithLabelValues("group")); got != 1 {
		t.Errorf("refused for another group %v, want 1", got)
	}
	// The control: this group's key reads.
	if got := peerGet(t, addr, "g-tenant-a", keyA, "v1"); got != http.StatusOK {
		t.Errorf("this group with its key: status %d, want 200", got)
	}
}

// TestServerRefusesNoVersion: a request without a version is refused (400)
// before anything is read, so the backend never reads without If-Match;
// the client never sends one. On the code before, an empty version was
// passed to the reader (200 from a backend read without If-Match).
func TestServerRefusesNoVersion(t *testing.T) {
	fr := &fakeReader{}
	sm := NewMetrics()
	srv := httptest.NewServer(NewServer(ServerOptions{Dataset: "ds", Group: group, Token: token, Reader: fr, Metrics: sm}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	if got := peerGet(t, addr, group, hex.EncodeToString(GroupKey(token, group)), ""); got != http.StatusBadRequest {
		t.Errorf("no version: status %d, want 400", got)
	}
	if n := fr.calls.Load(); n != 0 {
		t.Errorf("a request without a version read %d times, want 0", n)
	}
	if got := testutil.ToFloat64(sm.Refused.WithLabelValues("version")); got != 1 {
		t.Errorf("refused for no version %v, want 1", got)
	}

	var sent atomic.Int64
	counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent.Add(1); http.Error(w, "no", 500) })
	c, _, _ := newPair(t, counting)
	if err := c.Read(context.Background(), "a/b.jpg", "", 1000, 0, make([]byte, 10)); !errors.Is(err, ErrNoVersion) {
		t.Errorf("client read without a version: %v, want ErrNoVersion", err)
	}
	if sent.Load() != 0 {
		t.Error("the client sent a request without a version")
	}
}

// TestStaleEntryReadsNothing: two real peer servers on loopback serve the
// same dataset (one source) for two groups: tenant A's mount and tenant
// B's, read with other credentials. A's client whose member list holds a
// stale entry (B's server now listens at the port the entry names: ports
// are handed out lowest-free) gets a refusal, reads nothing through B's
// server, goes to the backend, and skips the entry while it is marked
// down; the same client reads from A's own server. On the code before,
// the stale entry read through B's mount (same token, same dataset).
func TestStaleEntryReadsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serve := func(g string) (*fakeReader, *Metrics, string) {
		fr, m := &fakeReader{}, NewMetrics()
		addr, err := Listen(ctx, "127.0.0.1:0", NewServer(ServerOptions{Dataset: "ds", Group: g, Token: token, Reader: fr, Metrics: m}))
		if err != nil {
			t.Fatal(err)
		}
		return fr, m, addr
	}
	frA, _, addrA := serve("g-tenant-a")
	frB, mB, addrB := serve("g-tenant-b")
	client := func(ownerAddr string) *Cluster {
		c, err := NewCluster(ClientOptions{Self: "self", Dataset: "ds", Group: "g-tenant-a", Token: token, Timeout: time.Second,
			Members: Static{{ID: "owner", Addr: ownerAddr}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	stale := client(addrB)
	p := make([]byte, 100)
	if err := stale.Read(ctx, "a/b.jpg", "v1", 1000, 0, p); !errors.Is(err, ErrRejected) {
		t.Fatalf("a read through another group's server: %v, want a rejection", err)
	}
	if n := frB.calls.Load(); n != 0 {
		t.Fatalf("tenant B's server read %d times for tenant A's client, want 0", n)
	}
	if got := testutil.ToFloat64(mB.Refused.WithLabelValues("group")); got != 1 {
		t.Errorf("B refused for another group %v times, want 1", got)
	}
	if !stale.isDown("owner") {
		t.Error("the stale entry is not marked down: every miss would ask it again")
	}
	if err := client(addrA).Read(ctx, "a/b.jpg", "v1", 1000, 0, p); err != nil || frA.calls.Load() != 1 {
		t.Errorf("a read through this group's own server: %v, %d reads, want nil and 1", err, frA.calls.Load())
	}
}

// TestGroupKey: keys differ per group and per token, and DatasetGroup is a
// valid group, stable for a dataset and distinct between datasets.
func TestGroupKey(t *testing.T) {
	if hex.EncodeToString(GroupKey(token, "a")) == hex.EncodeToString(GroupKey(token, "b")) ||
		hex.EncodeToString(GroupKey(token, "a")) == hex.EncodeToString(GroupKey([]byte("another-token-0123"), "a")) {
		t.Error("group keys collide")
	}
	g := DatasetGroup("s3://bucket/prefix")
	if err := ValidGroup(g); err != nil || g != DatasetGroup("s3://bucket/prefix") || g == DatasetGroup("s3://bucket/other") {
		t.Errorf("DatasetGroup = %q, %v", g, err)
	}
	for _, bad := range []string{"", "a b", "a\nb", strings.Repeat("g", MaxGroupLen+1)} {
		if ValidGroup(bad) == nil {
			t.Errorf("ValidGroup(%q) accepted", bad)
		}
	}
}
