package peer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"
)

// Defaults of ClientOptions.
const (
	DefaultTimeout = 5 * time.Second
	// A peer that failed is skipped (its files read from the backend) for
	// downFirst, doubling at each further failure up to downMax.
	downFirst = time.Second
	downMax   = 30 * time.Second
)

// ClientOptions configure a Cluster.
type ClientOptions struct {
	Self    string // this mount's peer id; required
	Dataset string // the dataset identity (backend ID); required
	// Group is this mount's peer group (ValidGroup); required. Requests
	// carry it and its key, GroupKey(Token, Group): a member of another
	// group refuses them.
	Group   string
	Members Membership // required
	Token   []byte     // required; only the group's key is kept
	// Timeout bounds one peer request, the owner's own backend fetch
	// included; past it the reader goes to the backend.
	Timeout time.Duration
	// Checksum, when set, returns the whole-file sha256 of path (from the
	// manifest) or nil; whole-file answers are checked against it.
	Checksum func(path string) []byte
	Metrics  *Metrics // nil: not counted
	// Transport, when set, replaces the default keep-alive transport
	// (tests).
	Transport http.RoundTripper
	// Catalog, when set, is the dataset's manifest: with members that
	// advertise capacities, ownership is Assign's byte-balanced one
	// (recomputed when the members change), else plain rendezvous.
	Catalog Catalog
	// Slack is ε of Assign's load bound; 0 takes DefaultSlack.
	Slack float64
}

// Cluster is this mount's view of the cluster-wide cache: which files it
// owns, and reads of the others from their owners. It implements the read
// path's interface (pkg/fusefs.Peers). Safe for concurrent use.
type Cluster struct {
	o    ClientOptions
	http *http.Client
	auth string // the Authorization header (holds the group key: never logged)

	mu   sync.Mutex
	down map[string]downState // by peer id

	assignMu sync.Mutex                 // serializes Assign runs
	assigned atomic.Pointer[Assignment] // for the last member list seen (Catalog and capacities only)
}

type downState struct {
	until time.Time
	wait  time.Duration
}

// NewCluster validates o and returns the Cluster.
func NewCluster(o ClientOptions) (*Cluster, error) {
	switch {
	case o.Self == "" || o.Dataset == "" || o.Members == nil:
		return nil, fmt.Errorf("%w: Self, Dataset and Members are required", ErrInvalid)
	case len(o.Token) == 0:
		return nil, fmt.Errorf("%w: a token is required", ErrInvalid)
	}
	if err := ValidGroup(o.Group); err != nil {
		return nil, err
	}
	auth := groupAuth(GroupKey(o.Token, o.Group))
	o.Token = nil // the group's key is all a Cluster needs
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	tr := o.Transport
	if tr == nil {
		// Never through an HTTP proxy: peers are on the node network.
		tr = newTransport(64)
	}
	return &Cluster{o: o, http: &http.Client{Transport: tr}, auth: auth, down: map[string]downState{}}, nil
}

// Owner returns the owner of path among the current members: false when
// there are none, or when path has no owner (Assign: no peer has room).
func (c *Cluster) Owner(path string) (Peer, bool) {
	p, _, ok := c.owner(path)
	return p, ok
}

// owner returns path's owner; members is false when there are no members.
func (c *Cluster) owner(path string) (p Peer, members, ok bool) {
	peers := c.o.Members.Peers()
	if len(peers) == 0 {
		return Peer{}, false, false
	}
	if a := c.assignment(peers); a != nil {
		if i, found := c.o.Catalog.Find(path); found {
			p, ok := a.OwnerOf(i)
			return p, true, ok
		}
	}
	p, ok = Owner(peers, FileKey(c.o.Dataset, path))
	return p, true, ok
}

// assignment returns the Assignment for peers (computed on the first call
// with a new list), or nil for plain rendezvous.
func (c *Cluster) assignment(peers []Peer) *Assignment {
	if c.o.Catalog == nil || !Bounded(peers) {
		return nil
	}
	if a := c.assigned.Load(); a != nil && slices.Equal(a.Peers(), peers) {
		return a
	}
	c.assignMu.Lock()
	defer c.assignMu.Unlock()
	if a := c.assigned.Load(); a != nil && slices.Equal(a.Peers(), peers) {
		return a
	}
	a := Assign(peers, c.o.Dataset, c.o.Catalog, c.o.Slack)
	c.assigned.Store(a)
	return a
}

// Owns reports whether this mount owns path: it admits the files it owns
// into its cache and no others. With no members it owns everything; a
// file without an owner (beyond the cluster's capacity) it does not own.
func (c *Cluster) Owns(path string) bool {
	p, members, ok := c.owner(path)
	return !members || ok && p.ID == c.o.Self
}

// Errors of Read, besides transport errors.
var (
	ErrDown     = errors.New("peer: owner marked down")
	ErrSelf     = errors.New("peer: this mount owns the file")
	ErrNoOwner  = errors.New("peer: no peer has room for the file")
	ErrRejected = errors.New("peer: answer rejected")
	// ErrNoVersion: a read without a version is never asked of a peer
	// (its server would refuse it: the backend read would skip If-Match).
	ErrNoVersion = errors.New("peer: no version to read")
)

// Read fills p with bytes [off, off+len(p)) of version of path (a file of
// size bytes) from the file's owner. Any error means "read it from the
// backend": the answer is never partly used. Checked: the status, the
// version the owner read, the length, the owner's xxh3-128 of the body and,
// for a whole file, the manifest's sha256 when Checksum gives one.
func (c *Cluster) Read(ctx context.Context, path, version string, size, off int64, p []byte) error {
	if version == "" {
		return ErrNoVersion
	}
	owner, members, ok := c.owner(path)
	switch {
	case members && !ok:
		return ErrNoOwner
	case !ok || owner.ID == c.o.Self:
		return ErrSelf
	}
	m := c.o.Metrics
	if c.isDown(owner.ID) {
		m.Fallbacks.For(owner.ID).Inc()
		return ErrDown
	}
	err := c.read(ctx, owner, path, version, size, off, p)
	if err != nil {
		m.Errors.For(owner.ID).Inc()
		m.Fallbacks.For(owner.ID).Inc()
		var rej *rejection
		if !errors.As(err, &rej) || rej.markDown {
			c.markDown(owner.ID)
		}
		return err
	}
	c.markUp(owner.ID)
	m.Hits.For(owner.ID).Inc()
	m.ReceivedBytes.For(owner.ID).Add(float64(len(p)))
	return nil
}

// rejection is an answer that arrived but is not used. markDown: the
// peer misbehaves (wrong bytes, server errors), not merely disagrees.
type rejection struct {
	msg      string
	markDown bool
}

func (r *rejection) Error() string { return "peer: answer rejected: " + r.msg }
func (r *rejection) Unwrap() error { return ErrRejected }

func (c *Cluster) read(ctx context.Context, owner Peer, path, version string, size, off int64, p []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	// The query by hand, in url.Values.Encode's order (sorted keys), without
	// its map.
	u := make([]byte, 0, 128+len(owner.Addr)+len(c.o.Dataset)+len(path)+len(version))
	u = append(u, "http://"...)
	u = append(u, owner.Addr...)
	u = append(u, ReadPath+"?dataset="...)
	u = append(u, url.QueryEscape(c.o.Dataset)...)
	u = append(u, "&len="...)
	u = strconv.AppendInt(u, int64(len(p)), 10)
	u = append(u, "&off="...)
	u = strconv.AppendInt(u, off, 10)
	u = append(u, "&path="...)
	u = append(u, url.QueryEscape(path)...)
	u = append(u, "&size="...)
	u = strconv.AppendInt(u, size, 10)
	u = append(u, "&version="...)
	u = append(u, url.QueryEscape(version)...)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, string(u), nil)
	if err != nil {
		return err
	}
	req.Header = http.Header{"Authorization": {c.auth}, HeaderGroup: {c.o.Group}, HeaderPeer: {c.o.Self}}
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL is in the error, never the token (a header).
		return fmt.Errorf("peer %s: %w", owner.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return &rejection{msg: fmt.Sprintf("peer %s: status %d", owner.ID, resp.StatusCode), markDown: resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized ||
			resp.StatusCode == http.StatusForbidden}
	}
	if v := resp.Header.Get(HeaderVersion); v != version {
		return &rejection{msg: fmt.Sprintf("peer %s answered another version", owner.ID), markDown: true}
	}
	want, err := hex.DecodeString(resp.Header.Get(HeaderChecksum))
	if err != nil || len(want) != 16 {
		return &rejection{msg: fmt.Sprintf("peer %s: no checksum", owner.ID), markDown: true}
	}
	if resp.ContentLength != int64(len(p)) {
		return &rejection{msg: fmt.Sprintf("peer %s: %d bytes, want %d", owner.ID, resp.ContentLength, len(p)), markDown: true}
	}
	if _, err := io.ReadFull(resp.Body, p); err != nil {
		return fmt.Errorf("peer %s: body: %w", owner.ID, err)
	}
	if got := xxh3.Hash128(p).Bytes(); !bytes.Equal(got[:], want) {
		return &rejection{msg: fmt.Sprintf("peer %s: bytes do not match their checksum", owner.ID), markDown: true}
	}
	if off == 0 && int64(len(p)) == size && c.o.Checksum != nil {
		if sum := c.o.Checksum(path); sum != nil {
			if got := sha256.Sum256(p); !bytes.Equal(got[:], sum) {
				return &rejection{msg: fmt.Sprintf("peer %s: bytes do not match the manifest's sha256", owner.ID), markDown: true}
			}
		}
	}
	return nil
}

func (c *Cluster) isDown(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(c.down[id].until)
}

func (c *Cluster) markDown(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.down[id]
	d.wait = min(max(2*d.wait, downFirst), downMax)
	d.until = time.Now().Add(d.wait)
	c.down[id] = d
}

func (c *Cluster) markUp(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.down, id)
}

// Share returns the share of files this mount owns among paths, by count
// and by bytes (size(i) gives the bytes of path i).
func (c *Cluster) Share(n int, path func(i int) string, size func(i int) int64) (files, bytes float64) {
	var owned, ownedBytes, total int64
	for i := range n {
		sz := size(i)
		total += sz
		if c.Owns(path(i)) {
			owned++
			ownedBytes += sz
		}
	}
	if n == 0 {
		return 0, 0
	}
	files = float64(owned) / float64(n)
	bytes = files
	if total > 0 {
		bytes = float64(ownedBytes) / float64(total)
	}
	return files, bytes
}

// AssignedShare returns this mount's share by the current Assignment (the
// files of the catalog, the files it owns, its share of the bytes); ok is
// false under plain rendezvous (then use Share).
func (c *Cluster) AssignedShare() (files, owned int, bytes float64, ok bool) {
	a := c.assignment(c.o.Members.Peers())
	if a == nil {
		return 0, 0, 0, false
	}
	files, owned, bytes = a.ShareOf(c.o.Self)
	return files, owned, bytes, true
}

// Peers returns the current members (a Membership itself, for the
// server's requester names).
func (c *Cluster) Peers() []Peer { return c.o.Members.Peers() }

// Members returns the current members.
func (c *Cluster) Members() []Peer { return c.o.Members.Peers() }
