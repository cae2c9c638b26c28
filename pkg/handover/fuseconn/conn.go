package fuseconn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Conn serves a FUSE connection this process did not open: the project's
// own request loop around go-fuse's exported ProtocolServer (which parses a
// request, calls the RawFileSystem and encodes the reply, but owns no
// device), because go-fuse's Server must read INIT itself and keeps the
// negotiated settings in unexported fields. The settings are restored by
// replaying the kernel's INIT request into the ProtocolServer and dropping
// its reply: the kernel sees no second INIT.
//
// The loop reads /dev/fuse as go-fuse's Server does (blocking reads, a
// request handled by the goroutine that read it, one more reader started
// whenever none is left waiting, at most maxReaders waiting); replies are
// written whole with one write. Splicing is off (ProtocolServer copies READ
// data into the reply); passthrough, which cached files use, bypasses the
// loop anyway.
//
// fd, ps and the sizes are immutable after NewConn; mu guards waiting.
type Conn struct {
	Device
	ps         *fuse.ProtocolServer
	mountpoint string
	bufSize    int
	log        *slog.Logger

	// bufs holds a reader's request and reply buffers while it is not
	// running: readers come and go with the load (and with a storm of
	// INTERRUPTs the kernel requeues while their request is unknown).
	bufs sync.Pool

	mu      sync.Mutex
	waiting int // readers blocked in read(2)
	loops   sync.WaitGroup
}

type buffers struct{ in, out []byte }

// maxReaders bounds the readers waiting for a request at once (go-fuse's
// bound: GOMAXPROCS within 2..16).
var maxReaders = min(max(runtime.GOMAXPROCS(0), 2), 16)

// Kernel ABI (include/uapi/linux/fuse.h), not in x/sys/unix.
const (
	fuseNotifyResend = 7 // FUSE_NOTIFY_RESEND, kernel ≥ 6.9
	iocBackingOpen   = 0x4010e501
	iocBackingClose  = 0x4004e502
	outHeaderSize    = 16
	opInit           = 26
)

// ErrInit: the INIT being replayed is not one, or does not negotiate what
// the running mount negotiated.
var ErrInit = errors.New("handover: INIT")

// ReplayInit returns the InitOut that a ProtocolServer with opts answers to
// init (a kernel INIT request: header and InitIn), without a kernel.
func ReplayInit(opts *fuse.MountOptions, init []byte) ([]byte, error) {
	_, out, err := replay(fuse.NewProtocolServer(fuse.NewDefaultRawFileSystem(), opts), init)
	return out, err
}

func replay(ps *fuse.ProtocolServer, init []byte) (*fuse.ProtocolServer, []byte, error) {
	if len(init) < int(unsafe.Sizeof(fuse.InHeader{})) || binary.NativeEndian.Uint32(init[4:8]) != opInit {
		return nil, nil, fmt.Errorf("%w: not an INIT request", ErrInit)
	}
	out := make([]byte, 4096)
	n, st := ps.HandleRequest([][]byte{init}, [][]byte{out})
	if !st.Ok() || n < outHeaderSize {
		return nil, nil, fmt.Errorf("%w: replay: %v", ErrInit, st)
	}
	if e := int32(binary.NativeEndian.Uint32(out[4:8])); e != 0 {
		return nil, nil, fmt.Errorf("%w: replay answered errno %d", ErrInit, -e)
	}
	return ps, out[outHeaderSize:n], nil
}

// InitRequest encodes the INIT the kernel sent a go-fuse Server (its
// KernelSettings) as the request bytes ReplayInit takes.
func InitRequest(in *fuse.InitIn) []byte {
	size := min(uintptr(in.Length), unsafe.Sizeof(*in))
	b := unsafe.Slice((*byte)(unsafe.Pointer(in)), unsafe.Sizeof(*in))
	return append([]byte(nil), b[:size]...)
}

// NewConn prepares to serve raw on the connection of dev (taking ownership
// of its descriptor), mounted at mountpoint, negotiated with init. want is the InitOut
// the running mount negotiated: the connection is refused unless opts
// negotiate the same. Call Start to serve.
func NewConn(dev Device, raw fuse.RawFileSystem, opts *fuse.MountOptions, init, want []byte, mountpoint string, log *slog.Logger) (*Conn, error) {
	ps, got, err := replay(fuse.NewProtocolServer(raw, opts), init)
	if err != nil {
		return nil, err
	}
	if string(got) != string(want) {
		return nil, fmt.Errorf("%w: this binary negotiates %x, the running mount negotiated %x", ErrInit, got, want)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxWrite := opts.MaxWrite
	if maxWrite <= 0 {
		maxWrite = 128 << 10
	}
	c := &Conn{Device: dev, ps: ps, mountpoint: mountpoint, bufSize: max(maxWrite, 1<<20) + 64<<10, log: log}
	c.bufs.New = func() any { return &buffers{in: make([]byte, c.bufSize), out: make([]byte, c.bufSize)} }
	return c, nil
}

// Device is a /dev/fuse descriptor of a connection. It registers
// passthrough backing files as fuse.Server does (fusefs.BackingFds).
type Device struct {
	Fd int
}

// Resend asks the kernel to queue again every request a process has read
// from the connection and not answered (FUSE_NOTIFY_RESEND): those a
// predecessor held back or was handling when it died. Only when no other
// process reads the connection any more, and before Start.
func (c *Conn) Resend() error {
	var h [outHeaderSize]byte
	binary.NativeEndian.PutUint32(h[0:4], outHeaderSize)
	binary.NativeEndian.PutUint32(h[4:8], fuseNotifyResend)
	if _, err := unix.Write(c.Fd, h[:]); err != nil {
		return fmt.Errorf("handover: FUSE_NOTIFY_RESEND (needs kernel 6.9): %w", err)
	}
	return nil
}

// Start serves the connection until it is unmounted.
func (c *Conn) Start() {
	c.loops.Add(1)
	go c.loop()
}

// Wait blocks until the connection is gone (unmounted) and every request
// handler has returned.
func (c *Conn) Wait() { c.loops.Wait() }

// Unmount unmounts the mount point; the loop ends when the kernel has
// aborted the connection.
func (c *Conn) Unmount() error {
	if err := unix.Unmount(c.mountpoint, 0); err != nil {
		return fmt.Errorf("handover: unmount %s: %w", c.mountpoint, err)
	}
	c.Wait()
	return nil
}

func (c *Conn) loop() {
	defer c.loops.Done()
	b := c.bufs.Get().(*buffers)
	defer c.bufs.Put(b)
	in, out := b.in, b.out
	for {
		c.mu.Lock()
		if c.waiting >= maxReaders {
			c.mu.Unlock()
			return
		}
		c.waiting++
		c.mu.Unlock()
		n, err := readRetry(c.Fd, in)
		c.mu.Lock()
		c.waiting--
		more := err == nil && c.waiting == 0
		if more {
			c.loops.Add(1)
		}
		c.mu.Unlock()
		if more {
			go c.loop()
		}
		switch {
		case errors.Is(err, unix.ENOENT): // the request was interrupted before we read it
			continue
		case errors.Is(err, unix.ENODEV): // unmounted
			return
		case err != nil:
			c.log.Error("handover: read /dev/fuse", "err", err)
			return
		}
		c.handle(in[:n], out)
	}
}

// handle answers one request.
func (c *Conn) handle(req, out []byte) {
	n, st := c.ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() {
		c.log.Error("handover: malformed FUSE request", "status", st)
		return
	}
	if n == 0 {
		return // no reply: FORGET, INTERRUPT
	}
	if _, err := unix.Write(c.Fd, out[:n]); err != nil && !errors.Is(err, unix.ENOENT) {
		// ENOENT: the request was interrupted meanwhile.
		c.log.Warn("handover: write FUSE reply", "err", err)
	}
}

func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// RegisterBackingFd registers a passthrough backing file with the
// connection (FUSE_DEV_IOC_BACKING_OPEN), as fuse.Server does.
func (c Device) RegisterBackingFd(m *fuse.BackingMap) (int32, syscall.Errno) {
	id, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(c.Fd), iocBackingOpen, uintptr(unsafe.Pointer(m)))
	return int32(id), errno
}

// UnregisterBackingFd unregisters a backing id (FUSE_DEV_IOC_BACKING_CLOSE),
// one this process or a predecessor registered: ids are the connection's.
func (c Device) UnregisterBackingFd(id int32) syscall.Errno {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(c.Fd), iocBackingClose, uintptr(unsafe.Pointer(&id)))
	return errno
}
