package peer

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/epochfs/epochfs/pkg/backend"
)

// The protocol (HTTP/1.1 with keep-alive, cleartext: the node network of
// one cluster; the group key is what guards it):
//
//	GET ReadPath?dataset=ID&path=P&version=V&size=S&off=O&len=N
//	Authorization: Bearer hex(GroupKey(TOKEN, GROUP))
//	X-Epochfs-Group: GROUP
//	X-Epochfs-Peer: REQUESTER-ID
//
// asks for bytes [O, O+N) of version V of file P (S bytes) of dataset ID,
// one cache entry of it (the whole file, or one block), of the server's
// group GROUP (group.go). 200 carries exactly N bytes with HeaderVersion
// (V, as the server read it) and HeaderChecksum (hex xxh3-128 of the
// body), both of which the client checks. Refusals, none of which reads:
// 401 no group, or a key that is not the named group's under the shared
// token (the bare token included); 403 the key of another group (a stale
// peer entry, another tenant's mount) or another dataset; 400 no version
// (the read would skip the backend's If-Match), a malformed request or a
// path backend.CleanPath refuses; 404 no such file; 409 another version
// (the server's manifest names another one, or the source changed); 502
// the server's backend failed.
const (
	ReadPath       = "/epochfs/peer/v1/read"
	HeaderPeer     = "X-Epochfs-Peer"
	HeaderGroup    = "X-Epochfs-Group"
	HeaderVersion  = "X-Epochfs-Version"
	HeaderChecksum = "X-Epochfs-Checksum"
)

// Reader is what the peer server reads with: the mount's cache in front of
// its backend (pkg/fusefs). ReadForPeer returns bytes [off, off+n) of path
// at version, a file of size bytes: from the cache, or fetched from the
// backend (and admitted when this mount owns the file: coalesced with the
// mount's own in-flight fetch of it). backend.ErrChanged for another
// version, backend.ErrNotExist for an unknown file.
type Reader interface {
	ReadForPeer(ctx context.Context, path, version string, size, off, n int64) ([]byte, error)
}

// ServerOptions configure a peer server.
type ServerOptions struct {
	Dataset string // the mount's dataset identity (backend ID); other datasets are refused
	// Group is the mount's peer group (ValidGroup); required: requests of
	// other groups are refused, whatever key they carry.
	Group   string
	Token   []byte     // the shared token; required (never logged)
	Reader  Reader     // required
	Members Membership // names requesters in metrics; nil: every requester is "unknown"
	Metrics *Metrics   // nil: not counted
	Timeout time.Duration
	Logger  *slog.Logger
}

// Server is the HTTP handler of the peer protocol. Immutable after
// NewServer.
type Server struct {
	o   ServerOptions
	key []byte // GroupKey(o.Token, o.Group)
}

// NewServer returns the handler. It panics without a token, a valid group
// or a reader (programming errors: the mount validates its flags first).
func NewServer(o ServerOptions) *Server {
	if len(o.Token) == 0 || o.Reader == nil || ValidGroup(o.Group) != nil {
		panic("peer: NewServer needs a token, a valid group and a reader")
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	return &Server{o: o, key: GroupKey(o.Token, o.Group)}
}

func (s *Server) refuse(w http.ResponseWriter, code int, reason, msg string) {
	s.o.Metrics.Refused.WithLabelValues(reason).Inc()
	http.Error(w, msg, code)
}

// authorize checks the request's group and key: 0 when it is this
// server's group with its key, else the refusal's status. The key is
// compared in constant time (hmac.Equal); a key of another group (valid for
// the group it names, under the shared token) is 403, anything else 401.
func (s *Server) authorize(r *http.Request) (status int, reason string) {
	group := r.Header.Get(HeaderGroup)
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	key, err := hex.DecodeString(tok)
	if !ok || err != nil || len(key) != sha256.Size || ValidGroup(group) != nil {
		return http.StatusUnauthorized, "unauthorized"
	}
	if group == s.o.Group {
		if hmac.Equal(key, s.key) {
			return 0, ""
		}
		return http.StatusUnauthorized, "unauthorized"
	}
	if hmac.Equal(key, GroupKey(s.o.Token, group)) {
		return http.StatusForbidden, "group"
	}
	return http.StatusUnauthorized, "unauthorized"
}

func (s *Server) requester(r *http.Request) string {
	id := r.Header.Get(HeaderPeer)
	if s.o.Members != nil {
		for _, p := range s.o.Members.Peers() {
			if p.ID == id {
				return id
			}
		}
	}
	return "unknown"
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if code, reason := s.authorize(r); code != 0 {
		msg := "unauthorized"
		if code == http.StatusForbidden {
			msg = "this peer serves another peer group"
		}
		s.refuse(w, code, reason, msg)
		return
	}
	if r.URL.Path != ReadPath || r.Method != http.MethodGet {
		s.refuse(w, http.StatusNotFound, "bad_request", "not found")
		return
	}
	q := r.URL.Query()
	if q.Get("dataset") != s.o.Dataset {
		s.refuse(w, http.StatusForbidden, "dataset", "this peer does not serve that dataset")
		return
	}
	path, version := q.Get("path"), q.Get("version")
	if version == "" {
		// Never read without a version: the backend would skip If-Match.
		s.refuse(w, http.StatusBadRequest, "version", "no version")
		return
	}
	clean, err := backend.CleanPath(path)
	if err != nil || clean != path || clean == "" {
		s.refuse(w, http.StatusBadRequest, "bad_request", "bad path")
		return
	}
	num := func(k string) int64 {
		v, err := strconv.ParseInt(q.Get(k), 10, 64)
		if err != nil || v < 0 {
			return -1
		}
		return v
	}
	size, off, n := num("size"), num("off"), num("len")
	if size < 0 || off < 0 || n < 0 || off+n > size || n > 64<<20 {
		s.refuse(w, http.StatusBadRequest, "bad_request", "bad range")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.Timeout)
	defer cancel()
	data, err := s.o.Reader.ReadForPeer(ctx, path, version, size, off, n)
	switch {
	case errors.Is(err, backend.ErrChanged):
		s.refuse(w, http.StatusConflict, "version", "another version")
		return
	case errors.Is(err, backend.ErrNotExist) || errors.Is(err, os.ErrNotExist):
		s.refuse(w, http.StatusNotFound, "not_found", "no such file")
		return
	case errors.Is(err, backend.ErrInvalidPath):
		s.refuse(w, http.StatusBadRequest, "bad_request", "bad path")
		return
	case err != nil:
		s.o.Logger.Warn("peer: cannot serve a peer's read", "path", path, "err", err)
		s.refuse(w, http.StatusBadGateway, "error", "read failed")
		return
	case int64(len(data)) != n:
		s.refuse(w, http.StatusBadGateway, "error", "short read")
		return
	}
	sum := xxh3.Hash128(data).Bytes()
	w.Header().Set(HeaderVersion, version)
	w.Header().Set(HeaderChecksum, hex.EncodeToString(sum[:]))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	if _, err := w.Write(data); err == nil {
		id := s.requester(r)
		s.o.Metrics.Served.For(id).Inc()
		s.o.Metrics.ServedBytes.For(id).Add(float64(n))
	}
}

// CheckListenAddr refuses an address that would listen on every interface
// by omission (":7070"): 0.0.0.0 or [::] must be written out.
func CheckListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("%w: listen address %q is not HOST:PORT", ErrInvalid, addr)
	}
	if host == "" {
		return fmt.Errorf("%w: listen address %q names no host; write 0.0.0.0 (or [::]) explicitly to listen on every interface", ErrInvalid, addr)
	}
	return nil
}

// Listen listens on addr (CheckListenAddr) and serves h until ctx ends.
// It returns the bound address.
func Listen(ctx context.Context, addr string, h http.Handler) (string, error) {
	if err := CheckListenAddr(addr); err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("peer: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return ln.Addr().String(), nil
}

// ReadToken reads the shared token from a file: its contents with
// surrounding white space trimmed, at least 16 bytes. Errors never contain
// the token.
func ReadToken(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("peer: token file: %w", err)
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if len(tok) < 16 {
		return nil, fmt.Errorf("%w: the token in %s is shorter than 16 bytes", ErrInvalid, file)
	}
	if strings.ContainsAny(string(tok), "\r\n") {
		return nil, fmt.Errorf("%w: the token in %s spans several lines", ErrInvalid, file)
	}
	return tok, nil
}
