package peer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"
)

// catalog is a Catalog of files with log-normal sizes (median 20 kB,
// 1 kB–200 kB, as bench-cluster's data), entry numbers in path order.
type catalog struct {
	paths []string
	sizes []int64
	index map[string]int
}

func newCatalog(n int, seed uint64) *catalog {
	r := rand.New(rand.NewPCG(seed, seed+1))
	c := &catalog{index: map[string]int{}}
	for i := range n {
		p := fmt.Sprintf("train/class%03d/img%06d.jpg", i%100, i)
		sz := int64(20_000 * math.Exp(r.NormFloat64()))
		c.paths = append(c.paths, p)
		c.sizes = append(c.sizes, min(max(sz, 1000), 200_000))
	}
	sort.Strings(c.paths)
	for i, p := range c.paths {
		c.index[p] = i
	}
	return c
}

func (c *catalog) Len() int         { return len(c.paths) }
func (c *catalog) Size(i int) int64 { return c.sizes[i] }
func (c *catalog) total() (t int64) {
	for _, s := range c.sizes {
		t += s
	}
	return t
}
func (c *catalog) Find(p string) (int, bool) { i, ok := c.index[p]; return i, ok }
func (c *catalog) Walk(fn func(int, string) bool) {
	for i, p := range c.paths {
		if !fn(i, p) {
			return
		}
	}
}

func withCapacity(ps []Peer, c int64) []Peer {
	out := make([]Peer, len(ps))
	for i, p := range ps {
		p.Capacity = c
		out[i] = p
	}
	return out
}

// moved is the fraction of files (by count) whose owner differs.
func moved(a, b *Assignment, n int) float64 {
	m := 0
	for i := range n {
		pa, oka := a.OwnerOf(i)
		pb, okb := b.OwnerOf(i)
		if oka != okb || pa.ID != pb.ID {
			m++
		}
	}
	return float64(m) / float64(n)
}

// TestAssignBalance: with capacities C = D/N every peer's owned bytes stay
// within C and the files without an owner are a sliver of D (plain
// rendezvous leaves a peer a few percent over D/N); with C = D/(2N) every
// peer is filled to within a file of C and D/2 has no owner.
func TestAssignBalance(t *testing.T) {
	const ds = "s3://host/bucket"
	for _, files := range []int{3000, 30000} {
		cat := newCatalog(files, uint64(files))
		d := cat.total()
		for _, n := range []int{3, 5} {
			for _, div := range []int64{1, 2} {
				c := d / int64(n) / div
				a := Assign(withCapacity(members(n), c), ds, cat, 0)
				for k := range n {
					owned, bound := a.Load(k)
					if owned > c || bound != c {
						t.Fatalf("%d files, N=%d, C=D/%d: peer %d owns %d bytes, bound %d, capacity %d", files, n, int64(n)*div, k, owned, bound, c)
					}
					if c-owned > 200_000 {
						t.Errorf("%d files, N=%d, C=D/%d: peer %d left %d bytes of its capacity unused", files, n, int64(n)*div, k, c-owned)
					}
				}
				unowned, total := a.Unowned()
				want := float64(total) - float64(n)*float64(c)
				if got := float64(unowned); got < want || got > want+float64(n)*200_000 {
					t.Errorf("%d files, N=%d, C=D/%d: %d bytes without owner, want ≈ %.0f", files, n, int64(n)*div, unowned, want)
				}
				// Plain rendezvous for comparison: the largest share.
				var plainMax int64
				shares := map[string]int64{}
				cat.Walk(func(i int, p string) bool {
					o, _ := Owner(members(n), FileKey(ds, p))
					shares[o.ID] += cat.sizes[i]
					plainMax = max(plainMax, shares[o.ID])
					return true
				})
				t.Logf("%d files, N=%d, C=D/%d: unowned %.2f%% of D (D−N·C: %.2f%%); plain rendezvous' largest share %.2f%% of D over D/N",
					files, n, int64(n)*div, 100*float64(unowned)/float64(d), 100*want/float64(d), 100*(float64(plainMax)-float64(d)/float64(n))/float64(d))
			}
		}
	}
}

// TestAssignMovement: a peer joining or leaving moves at most 1/N + ε of
// the files (N the larger set), with capacities C = D/3 each (tight at 3
// peers) and with no capacity bound but the balance bound (1+ε)·D/N.
func TestAssignMovement(t *testing.T) {
	const ds = "s3://host/bucket"
	const files = 30000
	cat := newCatalog(files, 7)
	d := cat.total()
	for _, tc := range []struct {
		name string
		cap  int64
	}{{"C=D/3", d / 3}, {"C=D/2", d / 2}, {"C=D", d}} {
		for _, n := range []int{3, 5, 8} {
			small := withCapacity(members(n), tc.cap)
			big := withCapacity(members(n+1), tc.cap)
			a, b := Assign(small, ds, cat, 0), Assign(big, ds, cat, 0)
			join := moved(a, b, cat.Len())
			// Leaving: the peer that leaves is one of the first n.
			left := append(append([]Peer(nil), big[:1]...), big[2:]...)
			leave := moved(b, Assign(left, ds, cat, 0), cat.Len())
			limit := 1/float64(n+1) + DefaultSlack
			t.Logf("%s, N=%d↔%d: join moves %.3f, leave moves %.3f (1/N = %.3f)", tc.name, n, n+1, join, leave, 1/float64(n+1))
			if join > limit || leave > limit {
				t.Errorf("%s, N=%d↔%d: join moves %.3f, leave %.3f of the files, want ≤ 1/N + ε = %.3f", tc.name, n, n+1, join, leave, limit)
			}
		}
	}
}

// TestClusterOwnership: a Cluster with a catalog uses Assign when the
// members advertise capacities (files beyond the capacities have no owner:
// not owned, Read says ErrNoOwner), plain rendezvous when none does, and
// recomputes when the members change.
func TestClusterOwnership(t *testing.T) {
	const ds = "ds"
	cat := newCatalog(2000, 3)
	d := cat.total()
	var cur atomic.Pointer[[]Peer]
	set := func(ps []Peer) { cur.Store(&ps) }
	m := membershipFunc(func() []Peer { return *cur.Load() })
	c, err := NewCluster(ClientOptions{Self: "node-0", Dataset: ds, Group: group, Members: m, Token: token, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, ps []Peer, want func(i int) (Peer, bool)) {
		t.Helper()
		set(ps)
		for i, p := range cat.paths {
			got, ok := c.Owner(p)
			w, wok := want(i)
			if ok != wok || got.ID != w.ID {
				t.Fatalf("%s: owner of %s = %v %v, want %v %v", name, p, got, ok, w, wok)
			}
			if c.Owns(p) != (ok && got.ID == "node-0") {
				t.Fatalf("%s: Owns(%s) = %v with owner %v %v", name, p, c.Owns(p), got, ok)
			}
			if !ok {
				if err := c.Read(context.Background(), p, "v1", cat.sizes[i], 0, make([]byte, cat.sizes[i])); !errors.Is(err, ErrNoOwner) {
					t.Fatalf("%s: Read of an unowned file = %v, want ErrNoOwner", name, err)
				}
			}
		}
	}
	plain := members(3)
	check("no capacities", plain, func(i int) (Peer, bool) { return Owner(plain, FileKey(ds, cat.paths[i])) })
	for _, div := range []int64{3, 6} {
		capped := withCapacity(members(3), d/div)
		a := Assign(capped, ds, cat, 0)
		check(fmt.Sprintf("C=D/%d", div), capped, a.OwnerOf)
		if un, _ := a.Unowned(); div == 6 && un < d/2 {
			t.Errorf("C=D/6: %d bytes without owner, want ≥ D/2 = %d", un, d/2)
		}
	}
}

type membershipFunc func() []Peer

func (f membershipFunc) Peers() []Peer { return f() }

// BenchmarkAssign: computing the ownership of a 1M-file manifest among 3
// peers with capacities (once per member list).
func BenchmarkAssign(b *testing.B) {
	cat := newCatalog(1_000_000, 1)
	ps := withCapacity(members(3), cat.total()/3)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		Assign(ps, "s3://host/bucket", cat, 0)
	}
}

// TestAssignedShare: the share a Cluster reports from its Assignment is
// the one Share computes file by file.
func TestAssignedShare(t *testing.T) {
	cat := newCatalog(3000, 5)
	ps := withCapacity(members(3), cat.total()/3)
	c, err := NewCluster(ClientOptions{Self: "node-1", Dataset: "ds", Group: group, Members: Static(ps), Token: token, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	files, owned, bytes, ok := c.AssignedShare()
	if !ok {
		t.Fatal("no assignment with capacities and a catalog")
	}
	fs, bs := c.Share(len(cat.paths), func(i int) string { return cat.paths[i] }, func(i int) int64 { return cat.sizes[i] })
	if files != 3000 || math.Abs(float64(owned)/3000-fs) > 1e-9 || math.Abs(bytes-bs) > 1e-9 {
		t.Errorf("AssignedShare = %d files, %d owned, %.4f of the bytes; Share = %.4f of the files, %.4f of the bytes", files, owned, bytes, fs, bs)
	}
	plain, _ := NewCluster(ClientOptions{Self: "node-1", Dataset: "ds", Group: group, Members: Static(members(3)), Token: token, Catalog: cat})
	if _, _, _, ok := plain.AssignedShare(); ok {
		t.Error("an assignment without capacities")
	}
}
