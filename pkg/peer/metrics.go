package peer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels of the peer metrics: a peer's id (never its address or a token),
// and why the peer server refused a request.
const (
	LabelPeer   = "peer"
	LabelReason = "reason"
)

// Values of `cachefs mount --peer-metrics` (mountapi.FlagPeerMetrics).
const (
	// MetricsAggregated (the default) sums the peer series over the peers:
	// a dataset on N nodes exports a fixed handful of series per mount,
	// not N per mount (N² over the cluster).
	MetricsAggregated = "aggregated"
	// MetricsPerPeer labels them with the peer's id (LabelPeer), for
	// debugging one peer on a small cluster.
	MetricsPerPeer = "per-peer"
)

// ParseMetricsMode validates a --peer-metrics value; "" is
// MetricsAggregated.
func ParseMetricsMode(s string) (perPeer bool, err error) {
	switch s {
	case "", MetricsAggregated:
		return false, nil
	case MetricsPerPeer:
		return true, nil
	}
	return false, fmt.Errorf("peer metrics %q: want %s or %s", s, MetricsAggregated, MetricsPerPeer)
}

// Counter is one peer counter: labelled with the peer's id in per-peer
// mode, one series for all peers otherwise.
type Counter struct {
	vec     *prometheus.CounterVec
	perPeer bool
}

// For returns the counter of peer id (the sum over peers when aggregated).
func (c *Counter) For(id string) prometheus.Counter {
	if c.perPeer {
		return c.vec.WithLabelValues(id)
	}
	return c.vec.WithLabelValues()
}

// Metrics are the peer counters of one mount (names fixed in
// docs/DESIGN.md). In per-peer mode label peer is a peer id, never an
// address or a token; on the server side it is the id the (authenticated)
// requester gave, or "unknown" when that id is not a member.
type Metrics struct {
	Hits          *Counter               // reads a peer answered with checked bytes
	ReceivedBytes *Counter               // bytes in those answers
	Errors        *Counter               // failed or rejected peer answers
	Fallbacks     *Counter               // reads of files the peer owns that went to the backend
	Served        *Counter               // requests this mount's peer server answered with bytes, by requester
	ServedBytes   *Counter               // bytes it sent
	Refused       *prometheus.CounterVec // requests the peer server refused, by reason (bounded: a fixed set)
	OwnedRatio    prometheus.Gauge       // this mount's share of the dataset's files (by bytes when known)
}

// NewMetrics returns the counters, unregistered, aggregated over the peers
// (no peer label).
func NewMetrics() *Metrics { return newMetrics(false) }

// NewPerPeerMetrics returns the counters, unregistered, labelled with the
// peer's id.
func NewPerPeerMetrics() *Metrics { return newMetrics(true) }

func newMetrics(perPeer bool) *Metrics {
	var labels []string
	if perPeer {
		labels = []string{LabelPeer}
	}
	cv := func(name, help string) *Counter {
		return &Counter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels), perPeer: perPeer}
	}
	return &Metrics{
		Hits:          cv("cachefs_peer_hits_total", "Reads of files this mount does not own that their owner peer answered with checked bytes."),
		ReceivedBytes: cv("cachefs_peer_received_bytes_total", "Bytes received from a peer in checked answers."),
		Errors:        cv("cachefs_peer_errors_total", "Peer requests that failed or whose answer was rejected (down, timeout, refused, another version, wrong bytes)."),
		Fallbacks:     cv("cachefs_peer_fallbacks_total", "Reads of files a peer owns that went to the backend instead (the peer failed, or was skipped while marked down)."),
		Served:        cv("cachefs_peer_served_total", "Requests this mount's peer server answered with bytes, by requesting peer."),
		ServedBytes:   cv("cachefs_peer_served_bytes_total", "Bytes this mount's peer server sent, by requesting peer."),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cachefs_peer_refused_total",
			Help: "Requests this mount's peer server refused, by reason (unauthorized, group, dataset, bad_request, version, not_found, error)."}, []string{LabelReason}),
		OwnedRatio: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cachefs_peer_owned_ratio",
			Help: "This mount's share (0 to 1) of the dataset it owns in cluster scope: of the bytes with a manifest, else 1/peers."}),
	}
}

// Register registers every counter with reg.
func (m *Metrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.Hits.vec, m.ReceivedBytes.vec, m.Errors.vec, m.Fallbacks.vec, m.Served.vec, m.ServedBytes.vec, m.Refused, m.OwnedRatio)
}
