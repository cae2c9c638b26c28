package policies

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/units"
)

// simDataset is a dataset of n files with log-normal sizes (median 8 KiB).
type simDataset struct {
	keys  []cache.Key
	sizes []int64
	total int64
}

func newSimDataset(n int, seed uint64) simDataset {
	rng := rand.New(rand.NewPCG(seed, 1))
	d := simDataset{}
	for i := range n {
		size := int64(math.Exp(math.Log(8<<10) + 0.8*rng.NormFloat64()))
		size = min(max(size, 64), 256<<10)
		d.keys = append(d.keys, cache.Key{Dataset: "sim://ds", Path: fmt.Sprintf("train/%05d.jpg", i), Version: "v1"})
		d.sizes = append(d.sizes, size)
		d.total += size
	}
	return d
}

// runEpochs reads every file of d once per epoch, in a new shuffled order
// each epoch (the same orders for every policy), and returns each epoch's
// byte hit ratio.
func runEpochs(t *testing.T, s *cache.Store, d simDataset, epochs int, seed uint64) []float64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	ratios := make([]float64, epochs)
	for e := range epochs {
		var hitBytes int64
		for _, i := range rng.Perm(len(d.keys)) {
			r, err := s.Get(context.Background(), d.keys[i], d.sizes[i], load(d.keys[i]))
			if err != nil {
				t.Fatalf("epoch %d: %v", e+1, err)
			}
			if r.File != nil {
				r.File.Close()
			}
			if r.Hit {
				hitBytes += d.sizes[i]
			}
		}
		ratios[e] = float64(hitBytes) / float64(d.total)
	}
	if st := s.Stats(); st.HitBytes+st.MissBytes != int64(epochs)*d.total || st.UsedBytes > st.CapacityBytes {
		t.Errorf("stats %+v: want hit+miss bytes %d and used <= capacity", st, int64(epochs)*d.total)
	}
	return ratios
}

// TestPolicyEpochs is the claim of docs/DESIGN.md "Why NR": over shuffled
// epochs NR hits exactly C/D of the bytes from epoch 2 on, and LRU, FIFO,
// Random and TinyLFU do no better (LRU thrashes).
func TestPolicyEpochs(t *testing.T) {
	const (
		files  = 2000
		epochs = 4
	)
	d := newSimDataset(files, 42)
	ratios := []struct {
		name string
		c    float64 // C/D
	}{{"1/16", 1.0 / 16}, {"5/16", 5.0 / 16}, {"10/16", 10.0 / 16}, {"1", 1}, {"1.25", 1.25}}

	root := fastTempDir(t)
	var mu sync.Mutex
	got := map[string][]float64{} // "policy C/D" -> per-epoch ratio
	t.Run("run", func(t *testing.T) {
		for _, pol := range Names() {
			for _, r := range ratios {
				t.Run(pol+"/"+r.name, func(t *testing.T) {
					t.Parallel()
					s := openStore(t, filepath.Join(root, pol, r.name), pol, int64(r.c*float64(d.total)))
					h := runEpochs(t, s, d, epochs, 99)
					if pol == cache.PolicyNR && s.Stats().Evictions != 0 {
						t.Errorf("NR evicted %d entries", s.Stats().Evictions)
					}
					mu.Lock()
					got[pol+" "+r.name] = h
					mu.Unlock()
				})
			}
		}
	})
	if t.Failed() {
		return
	}

	var table strings.Builder
	fmt.Fprintf(&table, "byte hit ratio per epoch, %d files, %s dataset\n", files, units.FormatSize(d.total))
	for _, r := range ratios {
		for _, pol := range Names() {
			fmt.Fprintf(&table, "C/D=%-5s %-7s", r.name, pol)
			for _, h := range got[pol+" "+r.name] {
				fmt.Fprintf(&table, " %6.4f", h)
			}
			table.WriteString("\n")
		}
	}
	t.Log("\n" + table.String())

	for _, r := range ratios {
		want := min(r.c, 1)
		nr := got[cache.PolicyNR+" "+r.name]
		for _, pol := range Names() {
			h := got[pol+" "+r.name]
			if h[0] != 0 {
				t.Errorf("%s C/D=%s: epoch 1 hit ratio %.4f, want 0", pol, r.name, h[0])
			}
			for e := 1; e < epochs; e++ {
				switch pol {
				case cache.PolicyNR:
					if math.Abs(h[e]-want) > 0.01 {
						t.Errorf("NR C/D=%s epoch %d: hit ratio %.4f, want %.4f ± 0.01", r.name, e+1, h[e], want)
					}
				case TinyLFU:
					if h[e] > nr[e]+0.02 {
						t.Errorf("tinylfu C/D=%s epoch %d: hit ratio %.4f > NR %.4f + 0.02", r.name, e+1, h[e], nr[e])
					}
				default:
					if h[e] > nr[e]+1e-9 {
						t.Errorf("%s C/D=%s epoch %d: hit ratio %.4f > NR %.4f", pol, r.name, e+1, h[e], nr[e])
					}
				}
				if pol == LRU && r.c < 1 && h[e] > 0.75*nr[e] {
					t.Errorf("LRU C/D=%s epoch %d: hit ratio %.4f, want thrashing (< 0.75 × NR %.4f)", r.name, e+1, h[e], nr[e])
				}
			}
		}
	}
}
