package nfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/willscott/go-nfs-client/nfs/rpc"

	"github.com/epochfs/epochfs/pkg/backend"
)

// The ONC RPC transport of the nfs backend: one synchronous call at a time
// per TCP connection, record marking, AUTH_UNIX, deadlines from the context
// and Options.RequestTimeout. The NFSv3, MOUNT and portmapper message
// layouts, constants and the AUTH_UNIX body come from go-nfs-client (its nfs,
// rpc and xdr packages); its rpc.Client is not used: it cannot be canceled,
// retries a call up to 100 times with a 5 s timeout each, and never frees a
// connection whose reply came late, so a slow server would wedge a pooled
// connection for good.

// errTransport marks a failure of the connection (dial, write, read,
// timeout, a malformed record): the connection is dropped and the call may
// be retried on a new one.
var errTransport = errors.New("nfs transport")

// rpcError is an RPC-level rejection (program or procedure unavailable,
// version mismatch, authentication error).
type rpcError struct {
	msg string
	// progUnavail: the server does not serve this program on this port.
	progUnavail bool
	// transient: SYSTEM_ERR, worth a retry.
	transient bool
	// auth: the server refused the credential (AUTH_ERROR).
	auth bool
}

func (e *rpcError) Error() string { return "rpc: " + e.msg }

// maxRecord bounds one reply record (a READ of the largest size we ask for
// plus headers, or a READDIRPLUS page); a larger one is a broken stream.
const maxRecord = 64 << 20

// rpcConn is one TCP connection to one RPC server. It is used by one call
// at a time (the pool hands it out exclusively); broken is set when the
// stream can no longer be trusted.
type rpcConn struct {
	c      net.Conn
	r      *bufio.Reader
	wbuf   []byte
	rbuf   []byte
	xid    uint32
	broken bool
	// reused: the pool handed it out before (it may have died idle).
	reused bool
}

// dialRPC connects to addr, through eg when it is not nil. As root it binds
// a reserved source port (below 1024), as the kernel client does, since most
// servers refuse other ports by default ("secure" exports; Ganesha's
// PrivilegedPort); elsewhere any port. A refusal of eg is returned as it is
// (a permission failure), not as errTransport.
func dialRPC(ctx context.Context, addr string, timeout time.Duration, eg backend.Egress) (*rpcConn, error) {
	dial := func(local *net.TCPAddr) (net.Conn, error) {
		if eg != nil {
			dctx, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				dctx, cancel = context.WithTimeout(ctx, timeout)
			}
			defer cancel()
			return eg.DialFrom(dctx, "tcp", addr, local)
		}
		d := net.Dialer{Timeout: timeout}
		if local != nil {
			d.LocalAddr = local
		}
		return d.DialContext(ctx, "tcp", addr)
	}
	var conn net.Conn
	var err error
	if os.Geteuid() == 0 {
		for range 16 {
			conn, err = dial(&net.TCPAddr{Port: 512 + rand.IntN(512)})
			if err == nil || !(errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
				break
			}
		}
		if err != nil && (errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL)) {
			conn, err = dial(nil)
		}
	} else {
		conn, err = dial(nil)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if backend.RefusedEgress(err) {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		return nil, fmt.Errorf("%w: dial %s: %w", errTransport, addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	// A small read buffer: a large record body (READ data) is bigger than it
	// and so goes from the socket straight into rbuf, one copy less.
	return &rpcConn{c: conn, r: bufio.NewReaderSize(conn, 16<<10), xid: rand.Uint32()}, nil
}

func (c *rpcConn) close() { _ = c.c.Close() }

// xdrEnc appends XDR-encoded values.
type xdrEnc struct{ b []byte }

func (e *xdrEnc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *xdrEnc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *xdrEnc) opaque(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}
func (e *xdrEnc) str(s string) { e.opaque([]byte(s)) }

// call sends one RPC and hands the reply's result body to decode, which
// must consume it before call returns (the buffer is reused). ctx and
// timeout bound the whole exchange; when either ends, the connection is
// broken (its stream would be out of step).
func (c *rpcConn) call(ctx context.Context, timeout time.Duration, auth rpc.Auth, prog, vers, proc uint32, args func(*xdrEnc), decode func(*bytes.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.xid++
	xid := c.xid
	c.encodeCall(xid, auth, prog, vers, proc, args)

	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	fail := func(err error) error {
		c.broken = true
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return fmt.Errorf("%w: %w", errTransport, err)
	}
	if _, err := c.c.Write(c.wbuf); err != nil {
		return fail(err)
	}
	for {
		rec, err := c.readRecord()
		if err != nil {
			return fail(err)
		}
		r := bytes.NewReader(rec)
		var hdr [3]uint32 // xid, REPLY, reply_stat
		if err := binary.Read(r, binary.BigEndian, &hdr); err != nil {
			return fail(fmt.Errorf("short reply: %w", err))
		}
		if hdr[0] != xid {
			continue // a late reply to an abandoned call
		}
		if hdr[1] != 1 {
			return fail(fmt.Errorf("message type %d is not a reply", hdr[1]))
		}
		rejected, err := readAccepted(r, hdr[2], prog, vers, proc)
		if err != nil {
			return fail(err)
		}
		if rejected != nil {
			return rejected
		}
		if err := decode(r); err != nil {
			var se *nfsStatError
			if errors.As(err, &se) || errors.Is(err, backend.ErrListTooLarge) {
				return err // a status the server sent, or a listing cap: the stream is fine
			}
			c.broken = true // a reply we cannot parse: do not trust the stream
			return fmt.Errorf("%w: decode reply: %w", errTransport, err)
		}
		return nil
	}
}

// encodeCall writes the record of one call into c.wbuf: record mark, RPC
// header with auth, then args.
func (c *rpcConn) encodeCall(xid uint32, auth rpc.Auth, prog, vers, proc uint32, args func(*xdrEnc)) {
	e := xdrEnc{b: c.wbuf[:0]}
	e.u32(0) // record mark, filled in below
	e.u32(xid)
	e.u32(0) // CALL
	e.u32(2) // RPC version
	e.u32(prog)
	e.u32(vers)
	e.u32(proc)
	e.u32(auth.Flavor)
	e.opaque(auth.Body)
	e.u32(0) // verifier AUTH_NONE
	e.u32(0)
	if args != nil {
		args(&e)
	}
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4)|0x80000000)
	c.wbuf = e.b
}

// readAccepted reads a reply's status after its header (replyStat is
// reply_stat) and leaves r at the result body. It returns the *rpcError of
// a call the server refused (the stream is fine), or an error that breaks
// the stream.
func readAccepted(r *bytes.Reader, replyStat, prog, vers, proc uint32) (rejected, broken error) {
	if replyStat != 0 { // MSG_DENIED
		var why [2]uint32
		_ = binary.Read(r, binary.BigEndian, &why)
		if why[0] == 1 {
			return &rpcError{msg: "authentication error " + strconv.Itoa(int(why[1])) + " (check the uid and gid options and the export's security settings)", auth: true}, nil
		}
		return &rpcError{msg: "RPC version mismatch"}, nil
	}
	var verf [2]uint32 // flavor, body length
	if err := binary.Read(r, binary.BigEndian, &verf); err != nil {
		return nil, fmt.Errorf("short reply: %w", err)
	}
	if _, err := r.Seek(int64((verf[1]+3)&^3), io.SeekCurrent); err != nil {
		return nil, err
	}
	var acceptStat uint32
	if err := binary.Read(r, binary.BigEndian, &acceptStat); err != nil {
		return nil, fmt.Errorf("short reply: %w", err)
	}
	switch acceptStat {
	case 0:
		return nil, nil
	case 1:
		return &rpcError{msg: fmt.Sprintf("program %d is not served on this port", prog), progUnavail: true}, nil
	case 2:
		return &rpcError{msg: fmt.Sprintf("program %d version %d is not served", prog, vers), progUnavail: true}, nil
	case 3:
		return &rpcError{msg: fmt.Sprintf("procedure %d of program %d is not served", proc, prog)}, nil
	case 4:
		return &rpcError{msg: "the server could not decode the arguments (GARBAGE_ARGS)"}, nil
	case 5:
		return &rpcError{msg: "server system error (SYSTEM_ERR)", transient: true}, nil
	default:
		return nil, fmt.Errorf("unknown accept status %d", acceptStat)
	}
}

// readRecord reads one record-marked RPC message (all its fragments) into
// c.rbuf.
func (c *rpcConn) readRecord() ([]byte, error) {
	buf := c.rbuf[:0]
	for {
		var mark [4]byte
		if _, err := io.ReadFull(c.r, mark[:]); err != nil {
			return nil, err
		}
		m := binary.BigEndian.Uint32(mark[:])
		n := int(m & 0x7fffffff)
		if len(buf)+n > maxRecord {
			return nil, fmt.Errorf("reply record over %d bytes", maxRecord)
		}
		start := len(buf)
		if cap(buf) < start+n {
			nb := make([]byte, start, start+n)
			copy(nb, buf)
			buf = nb
		}
		buf = buf[:start+n]
		if _, err := io.ReadFull(c.r, buf[start:]); err != nil {
			return nil, err
		}
		if m&0x80000000 != 0 {
			c.rbuf = buf
			return buf, nil
		}
	}
}

// rpcPool holds up to n connections to one address, each used by one call
// at a time; a broken connection is replaced by a new one at its next use.
type rpcPool struct {
	addr    string
	timeout time.Duration
	egress  backend.Egress
	slots   chan *rpcConn // n slots; nil means "dial at next use"

	mu     sync.Mutex
	live   map[*rpcConn]struct{}
	closed atomic.Bool
	dials  atomic.Int64
}

func newRPCPool(addr string, n int, timeout time.Duration, eg backend.Egress) *rpcPool {
	p := &rpcPool{addr: addr, timeout: timeout, egress: eg, slots: make(chan *rpcConn, n), live: map[*rpcConn]struct{}{}}
	for range n {
		p.slots <- nil
	}
	return p
}

var errPoolClosed = errors.New("nfs: backend closed")

// get waits for a free slot and returns its connection, dialing when the
// slot is empty. The caller must put it back.
func (p *rpcPool) get(ctx context.Context) (*rpcConn, error) {
	if p.closed.Load() {
		return nil, errPoolClosed
	}
	var c *rpcConn
	select {
	case c = <-p.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.take(ctx, c)
}

// take turns the content of a slot the caller took into a connection:
// c itself, or a new one for an empty slot (the slot is given back when
// the dial fails).
func (p *rpcPool) take(ctx context.Context, c *rpcConn) (*rpcConn, error) {
	if c != nil {
		c.reused = true
		return c, nil
	}
	c, err := dialRPC(ctx, p.addr, p.timeout, p.egress)
	if err != nil {
		p.slots <- nil
		return nil, err
	}
	p.dials.Add(1)
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		c.close()
		p.slots <- nil
		return nil, errPoolClosed
	}
	p.live[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
}

// tryGet returns an idle connection, dialing one for an empty slot, or nil
// at once when every slot is in use (or the dial fails).
func (p *rpcPool) tryGet(ctx context.Context) *rpcConn {
	if p.closed.Load() {
		return nil
	}
	select {
	case c := <-p.slots:
		c, err := p.take(ctx, c)
		if err != nil {
			return nil
		}
		return c
	default:
		return nil
	}
}

// put returns c to the pool; a broken c is closed and its slot emptied.
func (p *rpcPool) put(c *rpcConn) {
	if c.broken || p.closed.Load() {
		p.mu.Lock()
		delete(p.live, c)
		p.mu.Unlock()
		c.close()
		c = nil
	}
	p.slots <- c
}

// dropIdle closes the idle connections: one was found dead, the others
// most likely died with it (a server restart, a network cut).
func (p *rpcPool) dropIdle() {
	for range cap(p.slots) {
		select {
		case c := <-p.slots:
			if c != nil {
				c.broken = true
				p.put(c)
			} else {
				p.slots <- nil
			}
		default:
			return
		}
	}
}

// close closes every connection, in use or idle; calls in flight fail.
func (p *rpcPool) close() {
	p.mu.Lock()
	p.closed.Store(true)
	for c := range p.live {
		c.close()
	}
	p.live = map[*rpcConn]struct{}{}
	p.mu.Unlock()
}
