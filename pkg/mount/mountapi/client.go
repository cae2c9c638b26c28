package mountapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// cancelGrace bounds how long a cancelled RemotePrefetch waits for the
// final summary.
const cancelGrace = 30 * time.Second

// dial connects to the control socket of the mount serving cacheDir.
// ErrNoControl when no mount listens there.
func dial(ctx context.Context, cacheDir string) (*net.UnixConn, string, error) {
	path := ControlSocket(cacheDir)
	addr, done, err := SocketAddr(path)
	if err != nil {
		return nil, path, fmt.Errorf("%w: %s: %v", ErrNoControl, path, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	done()
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, path, fmt.Errorf("%w: %s: %v", ErrNoControl, path, err)
		}
		return nil, path, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	return c.(*net.UnixConn), path, nil
}

// send writes req as one line.
func send(conn net.Conn, path string, req ControlRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	return nil
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
func RemotePrefetch(ctx context.Context, cacheDir string, req ControlRequest, onEvent func(ControlEvent)) (PrefetchSummary, error) {
	req.Op = OpPrefetch
	conn, path, err := dial(ctx, cacheDir)
	if err != nil {
		return PrefetchSummary{}, err
	}
	defer conn.Close()
	if err := send(conn, path, req); err != nil {
		return PrefetchSummary{}, err
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
			return PrefetchSummary{}, fmt.Errorf("mount: control socket %s: bad event: %w", path, err)
		}
		switch ev.Type {
		case EventSummary:
			if ev.Summary == nil {
				return PrefetchSummary{}, fmt.Errorf("mount: control socket %s: summary without a body", path)
			}
			return *ev.Summary, nil
		case EventError:
			return PrefetchSummary{}, errors.New(ev.Error)
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
		return PrefetchSummary{}, fmt.Errorf("mount: control socket %s: interrupted, and the mount sent no summary: %w", path, err)
	}
	return PrefetchSummary{}, fmt.Errorf("mount: control socket %s: the mount hung up before the summary: %w", path, err)
}

// ask sends a request of op and returns the one event of type want that
// answers it, read within maxLine bytes. ctx bounds the whole exchange.
func ask(ctx context.Context, cacheDir, op, want string, maxLine int) (ControlEvent, error) {
	return askReq(ctx, cacheDir, ControlRequest{Op: op}, want, maxLine)
}

// askReq is ask with a whole request.
func askReq(ctx context.Context, cacheDir string, req ControlRequest, want string, maxLine int) (ControlEvent, error) {
	conn, path, err := dial(ctx, cacheDir)
	if err != nil {
		return ControlEvent{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if err := send(conn, path, req); err != nil {
		return ControlEvent{}, err
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, min(64<<10, maxLine)), maxLine)
	if !sc.Scan() {
		err := sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return ControlEvent{}, fmt.Errorf("mount: control socket %s: %w", path, err)
	}
	var ev ControlEvent
	if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
		return ControlEvent{}, fmt.Errorf("mount: control socket %s: bad event: %w", path, err)
	}
	if ev.Type == EventError {
		return ControlEvent{}, errors.New(ev.Error)
	}
	if ev.Type != want {
		return ControlEvent{}, fmt.Errorf("mount: control socket %s: got a %q event, want %q", path, ev.Type, want)
	}
	return ev, nil
}

// RemoteMetrics asks the mount serving cacheDir's control socket for its
// metrics (OpMetrics), in the Prometheus text exposition format. ctx bounds
// the whole exchange. ErrNoControl when no mount listens there.
func RemoteMetrics(ctx context.Context, cacheDir string) (string, error) {
	ev, err := ask(ctx, cacheDir, OpMetrics, EventMetrics, 16<<20)
	if err != nil {
		return "", err
	}
	return ev.Metrics, nil
}

// maxDatasetLine bounds the answer to OpDataset: a few URLs and numbers.
const maxDatasetLine = 64 << 10

// RemoteDataset asks the mount serving cacheDir's control socket what it
// serves (OpDataset). ctx bounds the whole exchange. ErrNoControl when no
// mount listens there.
func RemoteDataset(ctx context.Context, cacheDir string) (DatasetInfo, error) {
	ev, err := ask(ctx, cacheDir, OpDataset, EventDataset, maxDatasetLine)
	if err != nil {
		return DatasetInfo{}, err
	}
	if ev.Dataset == nil {
		return DatasetInfo{}, fmt.Errorf("mount: control socket %s: dataset event without a body", ControlSocket(cacheDir))
	}
	return *ev.Dataset, nil
}

// RemoteUnmount asks the mount serving cacheDir's control socket to
// unmount mountpoint (absolute and clean), and returns the mount's pid once
// it has agreed (it then unmounts as on SIGTERM; the caller waits for the
// mount point to go). ErrNoControl when no mount listens there; the mount's
// refusal (another mount point) as an error carrying its message.
func RemoteUnmount(ctx context.Context, cacheDir, mountpoint string) (int, error) {
	ev, err := askReq(ctx, cacheDir, ControlRequest{Op: OpUnmount, Mountpoint: mountpoint}, EventUnmounting, maxDatasetLine)
	if err != nil {
		return 0, err
	}
	return ev.Pid, nil
}
