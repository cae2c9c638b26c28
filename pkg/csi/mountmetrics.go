package csi

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// mountScrapeTimeout bounds asking one mount process for its metrics.
const mountScrapeTimeout = 2 * time.Second

// Labels the node plugin adds to each dataset mount's metrics. Neither
// carries credentials: the key is a hash (credentials enter it through an
// HMAC under the node's key), the id a hash of the source URL.
const (
	LabelDatasetKey = "dataset_key" // the dataset mount (ds-…): one per parameters and credentials
	LabelDatasetID  = "dataset_id"  // the dataset (pkg/cachelabel), as in the node's cache labels
)

// mountMemoryMetrics are the Go and process collectors' series of each
// mount process the node plugin serves beside its cachefs_* ones, labelled
// like them: every mount of a node shares one container's memory limit
// (the mounter's), and these show which mount uses it. A fixed handful, so
// a node's series stay bounded by its mounts. The node plugin's own series
// of these names have no dataset labels.
var mountMemoryMetrics = map[string]bool{
	"process_resident_memory_bytes": true, // what the container's limit counts
	"go_memstats_alloc_bytes":       true, // live heap objects
	"go_memstats_heap_inuse_bytes":  true, // heap spans in use
	"go_memstats_sys_bytes":         true, // all the runtime took from the OS
}

// remoteMetrics asks the mount serving cacheDir for its metrics
// (mountapi.RemoteMetrics), parsed by family name.
func remoteMetrics(ctx context.Context, cacheDir string) (map[string]*dto.MetricFamily, error) {
	text, err := mountapi.RemoteMetrics(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("csi: metrics of the mount of %s: %w", cacheDir, err)
	}
	return mfs, nil
}

// mountGatherer gathers the cachefs_* metrics (and mountMemoryMetrics) of
// every dataset mount on the node through their control sockets
// (OpMetrics), each labelled with its dataset key and id, so that one
// scrape of the node plugin's /metrics shows every mount's hits, misses,
// bytes, capacity, backend latency and memory.
type mountGatherer struct {
	n      *nodeState
	errors atomic.Int64 // mounts that did not answer a scrape
}

// MountMetrics returns a Gatherer of the node's dataset mounts' metrics,
// and a counter of the mounts that failed to answer (nil, nil in
// controller mode). The driver's /metrics serves it beside its own.
func (d *Driver) MountMetrics() (prometheus.Gatherer, func() int64) {
	if d.node == nil {
		return nil, nil
	}
	g := &mountGatherer{n: d.node}
	return g, g.errors.Load
}

// Gather asks every dataset mount in parallel; a mount that does not answer
// within mountScrapeTimeout is left out of this scrape (and counted).
func (g *mountGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.n.mu.Lock()
	dss := make([]*datasetMount, 0, len(g.n.datasets))
	for _, ds := range g.n.datasets {
		dss = append(dss, ds.identity())
	}
	g.n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), mountScrapeTimeout)
	defer cancel()
	results := make([]map[string]*dto.MetricFamily, len(dss))
	var wg sync.WaitGroup
	for i, ds := range dss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mfs, err := remoteMetrics(ctx, ds.CacheDir)
			if err != nil {
				g.errors.Add(1)
				g.n.cfg.log.Debug("dataset mount metrics not scraped", "key", ds.Key, "err", err)
				return
			}
			results[i] = mfs
		}()
	}
	wg.Wait()

	byName := map[string]*dto.MetricFamily{}
	for i, mfs := range results {
		if mfs == nil {
			continue
		}
		id, _ := cachelabel.DatasetID(dss[i].Params.Source)
		labels := []*dto.LabelPair{
			{Name: proto.String(LabelDatasetKey), Value: proto.String(dss[i].Key)},
			{Name: proto.String(LabelDatasetID), Value: proto.String(id)},
		}
		for name, mf := range mfs {
			if !strings.HasPrefix(name, "cachefs_") && !mountMemoryMetrics[name] {
				continue // the rest of the mount's go_/process_ metrics: the driver's own are enough
			}
			out := byName[name]
			if out == nil {
				out = &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type}
				byName[name] = out
			}
			for _, m := range mf.Metric {
				m.Label = append(m.Label, labels...)
				sort.Slice(m.Label, func(a, b int) bool { return m.Label[a].GetName() < m.Label[b].GetName() })
				out.Metric = append(out.Metric, m)
			}
		}
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].GetName() < out[b].GetName() })
	return out, nil
}
