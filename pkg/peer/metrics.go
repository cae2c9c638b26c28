package peer

import "github.com/prometheus/client_golang/prometheus"

// Labels of the peer metrics: a peer's id (never its address or a token),
// and why the peer server refused a request.
const (
	LabelPeer   = "peer"
	LabelReason = "reason"
)

// Metrics are the peer counters of one mount (names fixed in
// docs/DESIGN.md). Label peer is a peer id, never an address or a token;
// on the server side it is the id the (authenticated) requester gave, or
// "unknown" when that id is not a member.
type Metrics struct {
	Hits          *prometheus.CounterVec // reads a peer answered with checked bytes
	ReceivedBytes *prometheus.CounterVec
	Errors        *prometheus.CounterVec // failed or rejected peer answers
	Fallbacks     *prometheus.CounterVec // reads of files the peer owns that went to the backend
	Served        *prometheus.CounterVec // requests this mount's peer server answered with bytes, by requester
	ServedBytes   *prometheus.CounterVec
	Refused       *prometheus.CounterVec // requests the peer server refused, by reason
	OwnedShare    prometheus.Gauge       // this mount's share of the dataset's files (by bytes when known)
}

// NewMetrics returns the counters, unregistered.
func NewMetrics() *Metrics {
	cv := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	return &Metrics{
		Hits:          cv("cachefs_peer_hits_total", "Reads of files this mount does not own that their owner peer answered with checked bytes.", LabelPeer),
		ReceivedBytes: cv("cachefs_peer_received_bytes_total", "Bytes received from a peer in checked answers.", LabelPeer),
		Errors:        cv("cachefs_peer_errors_total", "Peer requests that failed or whose answer was rejected (down, timeout, refused, another version, wrong bytes).", LabelPeer),
		Fallbacks:     cv("cachefs_peer_fallbacks_total", "Reads of files a peer owns that went to the backend instead (the peer failed, or was skipped while marked down).", LabelPeer),
		Served:        cv("cachefs_peer_served_total", "Requests this mount's peer server answered with bytes, by requesting peer.", LabelPeer),
		ServedBytes:   cv("cachefs_peer_served_bytes_total", "Bytes this mount's peer server sent, by requesting peer.", LabelPeer),
		Refused:       cv("cachefs_peer_refused_total", "Requests this mount's peer server refused, by reason (unauthorized, group, dataset, bad_request, version, not_found, error).", LabelReason),
		OwnedShare: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cachefs_peer_owned_share",
			Help: "This mount's share of the dataset it owns in cluster scope: bytes with a manifest, else 1/peers."}),
	}
}

// Register registers every counter with reg.
func (m *Metrics) Register(reg prometheus.Registerer) {
	reg.MustRegister(m.Hits, m.ReceivedBytes, m.Errors, m.Fallbacks, m.Served, m.ServedBytes, m.Refused, m.OwnedShare)
}
