package prefetch_test

import (
	"context"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/prefetch"
)

// TestPrefetchOwnsOnly: in cluster scope a prefetch fills only the files
// this node owns, and "complete" means all of those.
func TestPrefetchOwnsOnly(t *testing.T) {
	d := makeDataset(t)
	b := backendtest.Open(t, d.dir)
	s := openStore(t, t.TempDir(), d.total)
	members := []peer.Peer{{ID: "a", Addr: "h:1"}, {ID: "b", Addr: "h:2"}, {ID: "c", Addr: "h:3"}}
	owns := func(p string) bool {
		o, _ := peer.Owner(members, peer.FileKey(b.ID(), p))
		return o.ID == "b"
	}
	var ownedFiles, ownedBytes int64
	for _, f := range d.files {
		if owns(f.Path) {
			ownedFiles++
			ownedBytes += f.Size
		}
	}
	sum := run(t, context.Background(), prefetch.Config{Backend: b, Store: s, Owns: owns})
	if sum.State != prefetch.StateComplete || sum.Files != ownedFiles || sum.Bytes != ownedBytes || sum.CachedBytes != ownedBytes {
		t.Errorf("summary %+v; want complete with the %d owned files (%d bytes)", sum, ownedFiles, ownedBytes)
	}
	if st := s.Stats(); st.UsedBytes != ownedBytes {
		t.Errorf("used %d bytes, want the owned %d", st.UsedBytes, ownedBytes)
	}
}
