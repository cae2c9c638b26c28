package mount

// The control endpoint: a unix socket inside the cache directory through
// which other processes on the node drive a running mount. A mount holds its
// cache directory's lock, so `cachefs prefetch` cannot open the store while
// the mount runs; instead it asks the mount, over this socket, to run the
// same pkg/prefetch code against the mount's own store, and shows the
// progress the mount streams back.
//
// Protocol (JSON lines): the client sends one ControlRequest line; the
// server answers with ControlEvent lines: "started", then "progress" every
// ProgressIntervalMS, then exactly one "summary" or "error", and closes the
// connection. A client that closes its sending side (or hangs up) cancels
// its prefetch; the server still sends the (interrupted) summary.
//
// The socket is <cache-dir>/control.sock, mode 0600 (and the cache
// directory is 0700): only its owner (root, in a node plugin) may connect.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/prefetch"
	"github.com/epochfs/epochfs/pkg/source"
)

// ControlSocketName is the control socket's name inside the cache directory.
const ControlSocketName = "control.sock"

// Control operations.
const (
	OpPrefetch = "prefetch"
	// OpMetrics asks for the mount's Prometheus metrics: one EventMetrics
	// event carrying them in the text exposition format.
	OpMetrics = "metrics"
)

// Event types of ControlEvent.
const (
	EventStarted  = "started"
	EventProgress = "progress"
	EventSummary  = "summary"
	EventError    = "error"
	EventMetrics  = "metrics"
)

const (
	maxRequestBytes       = 64 << 10
	requestTimeout        = 10 * time.Second
	writeTimeout          = 10 * time.Second
	defaultProgressPeriod = 500 * time.Millisecond
	// cancelGrace bounds how long a cancelled client waits for the final
	// summary.
	cancelGrace = 30 * time.Second
)

// ErrNoControl is returned (wrapped) by RemotePrefetch when no mount serves
// a control socket in the cache directory.
var ErrNoControl = errors.New("mount: no mount serves a control socket in this cache directory")

// ControlRequest is the one line a client sends.
type ControlRequest struct {
	Op string `json:"op"` // OpPrefetch
	// Source is the client's dataset URL; when set it must name the
	// mount's dataset.
	Source string `json:"source,omitempty"`
	// Workers bounds the concurrent backend reads; 0: prefetch's default.
	Workers int `json:"workers,omitempty"`
	// WholeFileMax and BlockSize, when not 0, must equal the mount's (the
	// mount's split decides the keys it reads).
	WholeFileMax int64 `json:"whole_file_max,omitempty"`
	BlockSize    int64 `json:"block_size,omitempty"`
	// ProgressIntervalMS is the period of progress events; 0: 500 ms.
	ProgressIntervalMS int `json:"progress_interval_ms,omitempty"`
}

// ControlEvent is one line the server sends.
type ControlEvent struct {
	Type     string             `json:"type"`
	Started  *PrefetchStarted   `json:"started,omitempty"`
	Progress *prefetch.Progress `json:"progress,omitempty"`
	Summary  *prefetch.Summary  `json:"summary,omitempty"`
	Error    string             `json:"error,omitempty"`
	Metrics  string             `json:"metrics,omitempty"` // EventMetrics: text exposition format
}

// PrefetchStarted describes the prefetch a mount runs for a client.
type PrefetchStarted struct {
	Pid           int    `json:"pid"`
	Source        string `json:"source"`
	Dataset       string `json:"dataset"`
	Manifest      bool   `json:"manifest"`
	WholeFileMax  int64  `json:"whole_file_max"`
	BlockSize     int64  `json:"block_size"`
	CapacityBytes int64  `json:"capacity_bytes"`
}

// ControlSocket returns the path of the control socket of a mount whose
// cache directory is cacheDir.
func ControlSocket(cacheDir string) string { return filepath.Join(cacheDir, ControlSocketName) }

// sockAddr returns an address for the unix socket at path that fits in a
// sockaddr_un (108 bytes): path itself, or /proc/self/fd/N/NAME through an
// open descriptor of its directory. done releases the descriptor.
func sockAddr(path string) (addr string, done func(), err error) {
	if len(path) < 100 {
		return path, func() {}, nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path)), func() { d.Close() }, nil
}

// controlServer serves a mount's control socket.
//
// m, ln, path, ctx and cancel are immutable after startControl; busy
// allows one prefetch at a time; wg counts connections being served.
type controlServer struct {
	m      *Mount
	ln     *net.UnixListener
	path   string
	ctx    context.Context // cancelled by close: ends every prefetch
	cancel context.CancelFunc
	wg     sync.WaitGroup
	busy   atomic.Bool
}

// startControl listens on the control socket. The mount holds the cache
// lock, so a socket file already there is a dead mount's: it is replaced.
func (m *Mount) startControl() (*controlServer, error) {
	path := ControlSocket(m.cfg.CacheDir)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("mount: control socket: %w", err)
	}
	addr, done, err := sockAddr(path)
	if err != nil {
		return nil, fmt.Errorf("mount: control socket: %w", err)
	}
	defer done()
	// Connecting needs write permission on the socket, which the umask
	// denies to others until the chmod below (and the cache directory is
	// 0700 anyway).
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // addr may be a /proc path: remove by the real one
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("mount: control socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &controlServer{m: m, ln: ln, path: path, ctx: ctx, cancel: cancel}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

func (c *controlServer) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			if c.ctx.Err() == nil {
				c.m.log.Error("control socket: accept failed; the control endpoint stops", "err", err)
			}
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer conn.Close()
			c.serve(conn)
		}()
	}
}

// close stops listening, cancels running prefetches, waits for them and
// removes the socket.
func (c *controlServer) close() {
	c.cancel()
	c.ln.Close()
	c.wg.Wait()
	_ = os.Remove(c.path)
}

func (c *controlServer) serve(conn *net.UnixConn) {
	send := func(ev ControlEvent) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err = conn.Write(append(b, '\n'))
		return err
	}
	fail := func(format string, args ...any) {
		_ = send(ControlEvent{Type: EventError, Error: fmt.Sprintf(format, args...)})
	}
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	r := bufio.NewReader(io.LimitReader(conn, maxRequestBytes))
	line, err := r.ReadBytes('\n')
	if err != nil {
		fail("control: reading the request: %v", err)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var req ControlRequest
	if err := json.Unmarshal(line, &req); err != nil {
		fail("control: bad request: %v", err)
		return
	}
	switch req.Op {
	case OpPrefetch:
		c.prefetch(conn, req, send, fail)
	case OpMetrics:
		c.metrics(send, fail)
	default:
		fail("control: unknown op %q (want %q or %q)", req.Op, OpPrefetch, OpMetrics)
	}
}

// metrics sends the mount's metrics (its registry, as /metrics serves it)
// in the text exposition format; a prefetch in progress does not delay it.
func (c *controlServer) metrics(send func(ControlEvent) error, fail func(string, ...any)) {
	if c.m.registry == nil {
		fail("control: this mount has no metrics")
		return
	}
	mfs, err := c.m.registry.Gather()
	if err != nil {
		fail("control: gather metrics: %v", err)
		return
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			fail("control: encode metrics: %v", err)
			return
		}
	}
	_ = send(ControlEvent{Type: EventMetrics, Metrics: b.String()})
}

func (c *controlServer) prefetch(conn *net.UnixConn, req ControlRequest, send func(ControlEvent) error, fail func(string, ...any)) {
	m := c.m
	whole, block := m.cfg.WholeFileMax, m.cfg.BlockSize
	if whole == 0 {
		whole = fusefs.DefaultWholeFileMax
	}
	if block == 0 {
		block = fusefs.DefaultBlockSize
	}
	if req.Source != "" {
		src, err := source.Parse(req.Source)
		if err != nil {
			fail("control: %v", err)
			return
		}
		if src.String() != m.src.String() {
			fail("control: this cache directory is used by a mount of %s, not of %s", m.src, src)
			return
		}
	}
	if (req.WholeFileMax != 0 && req.WholeFileMax != whole) || (req.BlockSize != 0 && req.BlockSize != block) {
		fail("control: the mount caches files up to %d bytes whole and larger ones in blocks of %d bytes; a prefetch through it must use the same split (asked for %d and %d)",
			whole, block, req.WholeFileMax, req.BlockSize)
		return
	}
	if !c.busy.CompareAndSwap(false, true) {
		fail("control: a prefetch is already running in this mount (pid %d)", os.Getpid())
		return
	}
	// Free the mount for the next prefetch before the final event, so that
	// a client that asks again right after the summary is not refused.
	release := sync.OnceFunc(func() { c.busy.Store(false) })
	defer release()
	p, err := prefetch.New(prefetch.Config{
		Backend:      m.backend,
		Store:        m.store,
		Manifest:     m.manifest,
		WholeFileMax: whole,
		BlockSize:    block,
		Workers:      req.Workers,
		ReadTimeout:  m.cfg.ReadTimeout,
		Logger:       m.log,
		Owns:         m.owns(),
	})
	if err != nil {
		fail("control: %v", err)
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	// The client cancels by closing its side (or hanging up).
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		cancel()
	}()
	st := m.store.Stats()
	if send(ControlEvent{Type: EventStarted, Started: &PrefetchStarted{
		Pid: os.Getpid(), Source: m.src.String(), Dataset: m.backend.ID(), Manifest: m.manifest != nil,
		WholeFileMax: whole, BlockSize: block, CapacityBytes: st.CapacityBytes,
	}}) != nil {
		return
	}
	m.log.Info("control: prefetch started", "workers", req.Workers)
	type result struct {
		sum prefetch.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := p.Run(ctx)
		done <- result{sum, err}
	}()
	period := defaultProgressPeriod
	if req.ProgressIntervalMS > 0 {
		period = time.Duration(req.ProgressIntervalMS) * time.Millisecond
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			pr := p.Progress()
			if send(ControlEvent{Type: EventProgress, Progress: &pr}) != nil {
				cancel() // the client is gone
			}
		case res := <-done:
			release()
			if res.err != nil {
				m.log.Warn("control: prefetch failed", "err", res.err)
				fail("%v", res.err)
				return
			}
			m.log.Info("control: prefetch ended", "state", res.sum.State, "message", res.sum.Message)
			_ = send(ControlEvent{Type: EventSummary, Summary: &res.sum})
			return
		}
	}
}

// RemotePrefetch asks the mount serving cacheDir to prefetch its dataset
// into its own cache, calls onEvent (when not nil) for every event it
// streams (started, progress), and returns the final summary. Cancelling
// ctx cancels the remote prefetch; RemotePrefetch then still returns its
// (interrupted) summary when the mount sends it within 30 s.
//
// Errors: ErrNoControl when no mount listens on the socket; the mount's
// refusal (another dataset, another split, a prefetch already running) or
// failure as an error carrying its message.
func RemotePrefetch(ctx context.Context, cacheDir string, req ControlRequest, onEvent func(ControlEvent)) (prefetch.Summary, error) {
	req.Op = OpPrefetch
	path := ControlSocket(cacheDir)
	addr, done, err := sockAddr(path)
	if err != nil {
		return prefetch.Summary{}, fmt.Errorf("%w: %s: %v", ErrNoControl, path, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	done()
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return prefetch.Summary{}, fmt.Errorf("%w: %s: %v", ErrNoControl, path, err)
		}
		return prefetch.Summary{}, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	b, err := json.Marshal(req)
	if err != nil {
		return prefetch.Summary{}, err
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return prefetch.Summary{}, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	stop := context.AfterFunc(ctx, func() {
		_ = conn.CloseWrite() // tells the mount to stop
		_ = conn.SetReadDeadline(time.Now().Add(cancelGrace))
	})
	defer stop()
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev ControlEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return prefetch.Summary{}, fmt.Errorf("mount: control socket %s: bad event: %w", path, err)
		}
		switch ev.Type {
		case EventSummary:
			if ev.Summary == nil {
				return prefetch.Summary{}, fmt.Errorf("mount: control socket %s: summary without a body", path)
			}
			return *ev.Summary, nil
		case EventError:
			return prefetch.Summary{}, errors.New(ev.Error)
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if ctx.Err() != nil {
		return prefetch.Summary{}, fmt.Errorf("mount: control socket %s: interrupted, and the mount sent no summary: %w", path, err)
	}
	return prefetch.Summary{}, fmt.Errorf("mount: control socket %s: the mount hung up before the summary: %w", path, err)
}

// RemoteMetrics asks the mount serving cacheDir's control socket for its
// metrics (OpMetrics), parsed by family name. ctx bounds the whole exchange.
// ErrNoControl when no mount listens there.
func RemoteMetrics(ctx context.Context, cacheDir string) (map[string]*dto.MetricFamily, error) {
	path := ControlSocket(cacheDir)
	addr, done, err := sockAddr(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoControl, path, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	done()
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoControl, path, err)
		}
		return nil, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write([]byte(`{"op":"` + OpMetrics + `"}` + "\n")); err != nil {
		return nil, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	if !sc.Scan() {
		err := sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	var ev ControlEvent
	if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
		return nil, fmt.Errorf("mount: control socket %s: bad event: %w", path, err)
	}
	if ev.Type == EventError {
		return nil, errors.New(ev.Error)
	}
	if ev.Type != EventMetrics {
		return nil, fmt.Errorf("mount: control socket %s: got a %q event, want %q", path, ev.Type, EventMetrics)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(ev.Metrics))
	if err != nil {
		return nil, fmt.Errorf("mount: control socket %s: metrics: %w", path, err)
	}
	return mfs, nil
}
