package mount

// The serving side of the control socket (package mountapi holds the
// protocol and its client): through it `cachefs prefetch` runs pkg/prefetch
// against the mount's own store, and the node plugin reads the mount's
// metrics and the size of its dataset.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/prefetch"
	"github.com/epochfs/epochfs/pkg/source"
)

const (
	maxRequestBytes       = 64 << 10
	requestTimeout        = 10 * time.Second
	writeTimeout          = 10 * time.Second
	defaultProgressPeriod = 500 * time.Millisecond
)

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
	path := mountapi.ControlSocket(m.cfg.CacheDir)
	ln, err := mountapi.ListenSocket(path)
	if err != nil {
		return nil, fmt.Errorf("mount: control socket %s: %w", path, err)
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

// reply writes the events of one answer to a client.
type reply struct{ conn *net.UnixConn }

func (r reply) send(ev mountapi.ControlEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_ = r.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = r.conn.Write(append(b, '\n'))
	return err
}

func (r reply) fail(format string, args ...any) {
	_ = r.send(mountapi.ControlEvent{Type: mountapi.EventError, Error: fmt.Sprintf(format, args...)})
}

func (c *controlServer) serve(conn *net.UnixConn) {
	r := reply{conn}
	_ = conn.SetReadDeadline(time.Now().Add(requestTimeout))
	line, err := bufio.NewReader(io.LimitReader(conn, maxRequestBytes)).ReadBytes('\n')
	if err != nil {
		r.fail("control: reading the request: %v", err)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var req mountapi.ControlRequest
	if err := json.Unmarshal(line, &req); err != nil {
		r.fail("control: bad request: %v", err)
		return
	}
	switch req.Op {
	case mountapi.OpPrefetch:
		c.prefetch(conn, req, r)
	case mountapi.OpMetrics:
		c.metrics(r)
	case mountapi.OpDataset:
		c.dataset(r)
	case mountapi.OpUnmount:
		c.unmount(req, r)
	default:
		r.fail("control: unknown op %q (want %q, %q, %q or %q)", req.Op, mountapi.OpPrefetch, mountapi.OpMetrics, mountapi.OpDataset, mountapi.OpUnmount)
	}
}

// metrics sends the mount's metrics (its registry, as /metrics serves it)
// in the text exposition format; a prefetch in progress does not delay it.
func (c *controlServer) metrics(r reply) {
	if c.m.registry == nil {
		r.fail("control: this mount has no metrics")
		return
	}
	mfs, err := c.m.registry.Gather()
	if err != nil {
		r.fail("control: gather metrics: %v", err)
		return
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			r.fail("control: encode metrics: %v", err)
			return
		}
	}
	_ = r.send(mountapi.ControlEvent{Type: mountapi.EventMetrics, Metrics: b.String()})
}

// dataset sends what the mount serves: the size comes from the manifest it
// loaded (none without one), so the node plugin never reads the manifest.
func (c *controlServer) dataset(r reply) {
	m := c.m
	info := mountapi.DatasetInfo{Source: m.src.String(), ID: m.backend.ID(), Manifest: m.manifest != nil}
	if m.manifest != nil {
		info.Bytes, info.Files = m.manifest.TotalBytes(), int64(m.manifest.Files())
	}
	if st := m.store.Stats(); st.Epoch > 0 {
		info.Epoch, info.EpochHitBytes, info.EpochMissBytes, info.EpochPrefetchedHitBytes = st.Epoch, st.EpochHitBytes, st.EpochMissBytes, st.EpochPrefetchedHitBytes
	}
	_ = r.send(mountapi.ControlEvent{Type: mountapi.EventDataset, Dataset: &info})
}

// split returns the mount's whole-file limit and block size, which a
// prefetch through it must use.
func (c *controlServer) split() (whole, block int64) {
	return cmp.Or(c.m.cfg.WholeFileMax, fusefs.DefaultWholeFileMax), cmp.Or(c.m.cfg.BlockSize, fusefs.DefaultBlockSize)
}

// checkPrefetch refuses a request for another dataset or another split.
func (c *controlServer) checkPrefetch(req mountapi.ControlRequest) error {
	m := c.m
	if req.Source != "" {
		src, err := source.Parse(req.Source)
		if err != nil {
			return fmt.Errorf("control: %w", err)
		}
		if src.String() != m.src.String() {
			return fmt.Errorf("control: this cache directory is used by a mount of %s, not of %s", m.src, src)
		}
	}
	whole, block := c.split()
	if (req.WholeFileMax != 0 && req.WholeFileMax != whole) || (req.BlockSize != 0 && req.BlockSize != block) {
		return fmt.Errorf("control: the mount caches files up to %d bytes whole and larger ones in blocks of %d bytes; a prefetch through it must use the same split (asked for %d and %d)",
			whole, block, req.WholeFileMax, req.BlockSize)
	}
	return nil
}

// prefetch runs one prefetch for a client, one at a time per mount, and
// streams its events.
func (c *controlServer) prefetch(conn *net.UnixConn, req mountapi.ControlRequest, r reply) {
	m := c.m
	if err := c.checkPrefetch(req); err != nil {
		r.fail("%v", err)
		return
	}
	if !c.busy.CompareAndSwap(false, true) {
		r.fail("control: a prefetch is already running in this mount (pid %d)", os.Getpid())
		return
	}
	// Free the mount for the next prefetch before the final event, so that
	// a client that asks again right after the summary is not refused.
	release := sync.OnceFunc(func() { c.busy.Store(false) })
	defer release()
	whole, block := c.split()
	p, err := prefetch.New(prefetch.Config{
		Backend: m.backend, Store: m.store, Manifest: m.manifest,
		WholeFileMax: whole, BlockSize: block, Workers: req.Workers,
		ReadTimeout: m.cfg.ReadTimeout, Logger: m.log, Owns: m.owns(),
	})
	if err != nil {
		r.fail("control: %v", err)
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
	if r.send(mountapi.ControlEvent{Type: mountapi.EventStarted, Started: &mountapi.PrefetchStarted{
		Pid: os.Getpid(), Source: m.src.String(), Dataset: m.backend.ID(), Manifest: m.manifest != nil,
		WholeFileMax: whole, BlockSize: block, CapacityBytes: st.CapacityBytes,
	}}) != nil {
		return
	}
	m.log.Info("control: prefetch started", "workers", req.Workers)
	period := defaultProgressPeriod
	if req.ProgressIntervalMS > 0 {
		period = time.Duration(req.ProgressIntervalMS) * time.Millisecond
	}
	c.stream(ctx, cancel, p, period, r, release)
}

// stream runs p, sends its progress every period and then its summary (or
// its error), calling release before the final event. A client gone
// cancels the run.
func (c *controlServer) stream(ctx context.Context, cancel context.CancelFunc, p *prefetch.Prefetcher, period time.Duration, r reply, release func()) {
	type result struct {
		sum prefetch.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := p.Run(ctx)
		done <- result{sum, err}
	}()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			pr := p.Progress()
			if r.send(mountapi.ControlEvent{Type: mountapi.EventProgress, Progress: &pr}) != nil {
				cancel() // the client is gone
			}
		case res := <-done:
			release()
			if res.err != nil {
				c.m.log.Warn("control: prefetch failed", "err", res.err)
				r.fail("%v", res.err)
				return
			}
			c.m.log.Info("control: prefetch ended", "state", res.sum.State, "message", res.sum.Message)
			_ = r.send(mountapi.ControlEvent{Type: mountapi.EventSummary, Summary: &res.sum})
			return
		}
	}
}

// unmount answers OpUnmount: when req names this mount's mount point, it
// acknowledges and asks Run to unmount (as on SIGTERM: lazily when readers
// hold files open).
func (c *controlServer) unmount(req mountapi.ControlRequest, r reply) {
	mine, err := filepath.Abs(c.m.cfg.Mountpoint)
	if err != nil {
		r.fail("control: unmount: %v", err)
		return
	}
	if req.Mountpoint == "" || filepath.Clean(req.Mountpoint) != mine {
		r.fail("control: unmount: this mount serves %s, not %q", mine, req.Mountpoint)
		return
	}
	_ = r.send(mountapi.ControlEvent{Type: mountapi.EventUnmounting, Pid: os.Getpid()})
	c.m.requestStop()
}
