package nfs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/nfs"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

// nfsDirMaker builds each dataset in a temporary directory served by
// serve (which returns the source URL) and opens it with opts.
func nfsDirMaker(serve func(t *testing.T, dir string) string, opts backend.Options) (backendtest.Maker, backendtest.Modifier) {
	var mu sync.Mutex
	dirs := map[backend.Backend]string{}
	mk := func(t *testing.T, files map[string][]byte) backend.Backend {
		dir := t.TempDir()
		backendtest.WriteFiles(t, dir, files)
		src, err := source.Parse(serve(t, dir))
		if err != nil {
			t.Fatal(err)
		}
		b, err := all.Open(context.Background(), src, opts)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		dirs[b] = dir
		mu.Unlock()
		return b
	}
	modify := func(t *testing.T, b backend.Backend, p string, data []byte) {
		mu.Lock()
		dir := dirs[b]
		mu.Unlock()
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return mk, modify
}

func goNFS(t *testing.T, dir string) string { return nfs.StartGoNFS(t, dir, 4096).URL }

// TestNFSConformanceGoNFS runs the conformance suite against go-nfs
// in-process.
func TestNFSConformanceGoNFS(t *testing.T) {
	mk, modify := nfsDirMaker(goNFS, backend.Options{})
	backendtest.Run(t, mk, backendtest.WithModify(modify))
}

// TestNFSSmallReadsOneConn reads with the smallest READ size over one
// connection: a ReadAt spans many READs, each checked against the version.
func TestNFSSmallReadsOneConn(t *testing.T) {
	mk, modify := nfsDirMaker(func(t *testing.T, dir string) string {
		return goNFS(t, dir) + "?conns=1&rsize=4096"
	}, backend.Options{})
	backendtest.Run(t, mk, backendtest.WithModify(modify))
}

// TestNFSChunkedReads: a ReadAt of many READs spreads its chunks over the
// idle connections (4 here), each checked against the version.
func TestNFSChunkedReads(t *testing.T) {
	mk, modify := nfsDirMaker(func(t *testing.T, dir string) string {
		return goNFS(t, dir) + "?conns=4&rsize=4096"
	}, backend.Options{})
	backendtest.Run(t, mk, backendtest.WithModify(modify))
}

func TestNFSSymlinksAndSpecialNames(t *testing.T) {
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"a": []byte("a"), "sub/b": []byte("b")})
	outside := t.TempDir()
	backendtest.WriteFiles(t, outside, map[string][]byte{"secret": []byte("secret")})
	for name, target := range map[string]string{
		"link-in":      "a",
		"link-dir":     "sub",
		"link-out":     filepath.Join(outside, "secret"),
		"link-dotdot":  "../",
		"link-missing": "nope",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bad\nname"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b := backendtest.OpenOptions(t, nfs.StartGoNFS(t, dir, 1024).URL, backend.Options{Logger: backendtest.Logger(&logs)})
	ctx := context.Background()
	es, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "a,sub" {
		t.Errorf("List = %q, want only a and sub (symlinks and bad names skipped)", names)
	}
	if got := backend.Skipped(b); got != 6 {
		t.Errorf("Skipped = %d, want 6 (5 symlinks, 1 bad name)\n%s", got, logs.String())
	}
	buf := make([]byte, 10)
	for _, p := range []string{"link-in", "link-out", "link-dir/b", "link-dotdot/secret", "link-missing"} {
		if _, err := b.Stat(ctx, p); !errors.Is(err, backend.ErrNotExist) {
			t.Errorf("Stat(%q) = %v, want ErrNotExist (symlinks are not followed)", p, err)
		}
		if _, err := b.ReadAt(ctx, p, "", buf, 0); !errors.Is(err, backend.ErrNotExist) {
			t.Errorf("ReadAt(%q) = %v, want ErrNotExist", p, err)
		}
	}
}

func TestNFSIDAndOpenErrors(t *testing.T) {
	dir := t.TempDir()
	srv := nfs.StartGoNFS(t, dir, 1024)
	b := backendtest.OpenOptions(t, srv.URL+"?uid=1000&gid=1000&conns=2", backend.Options{})
	if want := "nfs://" + srv.Host + "/export"; b.ID() != want {
		t.Errorf("ID = %q, want %q (no options, no credentials)", b.ID(), want)
	}
	// Nothing listens: ErrUnavailable after the retries, quickly.
	port := testenv.FreePort(t)
	src, _ := source.Parse("nfs://127.0.0.1:" + strconv.Itoa(port) + "/export?mountport=" + strconv.Itoa(port))
	start := time.Now()
	_, err := all.Open(context.Background(), src, backend.Options{Retry: backend.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond}})
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Open of a closed port = %v, want ErrUnavailable", err)
	}
	if backend.Retries(b) != 0 {
		t.Errorf("Retries = %d on a healthy server", backend.Retries(b))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open of a closed port took %v", d)
	}
	// Lazy: the error comes at the first call.
	lazy, err := all.Open(context.Background(), src, backend.Options{Lazy: true, Retry: backend.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatalf("lazy Open: %v", err)
	}
	defer lazy.Close()
	if _, err := lazy.Stat(context.Background(), ""); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("lazy Stat = %v, want ErrUnavailable", err)
	}
}

// TestNFSParallelReads reads many files at once over the pool and checks
// every byte; then closes the backend under readers.
func TestNFSParallelReads(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{}
	for i := range 200 {
		data := bytes.Repeat([]byte{byte(i)}, 1000+i*997)
		files["d"+strconv.Itoa(i%7)+"/f"+strconv.Itoa(i)] = data
	}
	backendtest.WriteFiles(t, dir, files)
	b := backendtest.OpenOptions(t, nfs.StartGoNFS(t, dir, 4096).URL+"?conns=4&rsize=65536", backend.Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(files))
	for p, want := range files {
		wg.Go(func() {
			e, err := b.Stat(ctx, p)
			if err != nil {
				errs <- err
				return
			}
			buf := make([]byte, len(want)+10)
			n, err := b.ReadAt(ctx, p, e.Version, buf, 0)
			if err != io.EOF || !bytes.Equal(buf[:n], want) {
				errs <- errors.New(p + ": wrong bytes or error " + errString(err))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, ""); err == nil {
		t.Error("Stat after Close: no error")
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestNFSConformanceGanesha runs the conformance suite against the real
// NFS-Ganesha in a network namespace (portmapper, MOUNT on its own port).
func TestNFSConformanceGanesha(t *testing.T) {
	if testing.Short() {
		t.Skip("real server: not in -short mode")
	}
	mk, modify := nfsDirMaker(func(t *testing.T, dir string) string {
		return nfs.StartGanesha(t, dir).URL
	}, backend.Options{})
	backendtest.Run(t, mk, backendtest.WithModify(modify))
}

// tcpProxy forwards 127.0.0.1 connections to a target that can be changed,
// and can cut every open connection or stall them: a server restart or a
// network fault under the nfs backend's pool.
type tcpProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	stall  bool
	conns  map[net.Conn]struct{}
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve(c net.Conn) {
	p.mu.Lock()
	target, stall := p.target, p.stall
	p.mu.Unlock()
	if stall {
		p.track(c)
		return // accepted, never answered
	}
	u, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.track(c)
	p.track(u)
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

func (p *tcpProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

// cut closes every connection made so far.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) set(target string, stall bool) {
	p.mu.Lock()
	p.target, p.stall = target, stall
	p.mu.Unlock()
}

// TestNFSReconnects: connections cut under the pool are replaced; a server
// that restarts with new file handles (go-nfs keeps them in memory) is
// mounted again; a stalled server is ErrUnavailable within the request
// timeout and retries, and reads resume once it answers.
func TestNFSReconnects(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{}
	for i := range 40 {
		files["d/f"+strconv.Itoa(i)] = bytes.Repeat([]byte{byte(i)}, 10_000+i)
	}
	backendtest.WriteFiles(t, dir, files)
	srv1 := nfs.StartGoNFS(t, dir, 4096)
	px := startTCPProxy(t, srv1.Host)
	b := backendtest.OpenOptions(t, "nfs://"+px.addr()+"/export?conns=4", backend.Options{
		RequestTimeout: 500 * time.Millisecond,
		Retry:          backend.RetryPolicy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond},
	})
	ctx := context.Background()
	readAll := func(when string) {
		t.Helper()
		for p, want := range files {
			buf := make([]byte, len(want))
			if n, err := b.ReadAt(ctx, p, "", buf, 0); n != len(want) || (err != nil && err != io.EOF) || !bytes.Equal(buf, want) {
				t.Fatalf("%s: ReadAt(%q) = %d, %v", when, p, n, err)
			}
		}
	}
	readAll("first")
	px.cut()
	readAll("after the connections were cut")

	srv2 := nfs.StartGoNFS(t, dir, 4096) // new handles: the old ones are stale
	px.set(srv2.Host, false)
	px.cut()
	readAll("after a server restart")
	if _, err := b.List(ctx, "d"); err != nil {
		t.Fatalf("List after a server restart: %v", err)
	}

	px.set(srv2.Host, true)
	px.cut()
	start := time.Now()
	if _, err := b.Stat(ctx, "d/f1"); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Stat on a stalled server = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stalled server took %v to fail (request timeout 500ms, 3 attempts)", d)
	}
	if backend.Retries(b) == 0 {
		t.Error("no retries counted")
	}
	px.set(srv2.Host, false)
	px.cut()
	readAll("after the stall")
}

// TestNFSGaneshaErrors: the real server's refusals map to the sentinels: a
// path it does not export, files and directories the URL's uid may not
// read.
func TestNFSGaneshaErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("real server: not in -short mode")
	}
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"open": []byte("anyone"), "secret": []byte("root only"), "private/x": []byte("x")})
	if err := os.Chmod(filepath.Join(dir, "secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Readable by the root group only: a uid that is not root must not
	// claim that group.
	backendtest.WriteFiles(t, dir, map[string][]byte{"group0": []byte("root group")})
	if err := os.Chmod(filepath.Join(dir, "group0"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, "group0"), 0, 0); err != nil {
		t.Fatal(err)
	}
	g := nfs.StartGanesha(t, dir)
	ctx := context.Background()

	src, err := source.Parse("nfs://" + g.Addr + "/not/exported")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := all.Open(ctx, src, backend.Options{}); !errors.Is(err, backend.ErrNotExist) && !errors.Is(err, backend.ErrPermission) {
		t.Errorf("Open of a path the server does not export = %v, want ErrNotExist or ErrPermission", err)
	} else {
		t.Logf("Open of a path the server does not export: %v", err)
	}

	// The ports named in the URL: NFS only (MOUNT on 2049 or through the
	// portmapper), and both.
	for _, u := range []string{"nfs://" + g.Addr + ":2049" + g.Export, "nfs://" + g.Addr + ":2049" + g.Export + "?mountport=20048"} {
		pb := backendtest.OpenOptions(t, u, backend.Options{})
		if _, err := pb.Stat(ctx, "open"); err != nil {
			t.Errorf("%s: Stat: %v", u, err)
		}
	}

	b := backendtest.OpenOptions(t, g.URL+"?uid=1000&gid=1000", backend.Options{})
	buf := make([]byte, 64)
	if n, err := b.ReadAt(ctx, "open", "", buf, 0); err != io.EOF || string(buf[:n]) != "anyone" {
		t.Errorf("ReadAt(open) as uid 1000 = %q, %v", buf[:n], err)
	}
	if _, err := b.ReadAt(ctx, "secret", "", buf, 0); !errors.Is(err, backend.ErrPermission) {
		t.Errorf("ReadAt(secret) as uid 1000 = %v, want ErrPermission", err)
	}
	if _, err := b.ReadAt(ctx, "group0", "", buf, 0); !errors.Is(err, backend.ErrPermission) {
		t.Errorf("ReadAt(group0) as uid 1000 gid 1000 = %v, want ErrPermission (no supplementary group 0)", err)
	}
	gid0 := backendtest.OpenOptions(t, g.URL+"?uid=1000&gid=0", backend.Options{})
	if n, err := gid0.ReadAt(ctx, "group0", "", buf, 0); err != io.EOF || string(buf[:n]) != "root group" {
		t.Errorf("ReadAt(group0) as uid 1000 gid 0 = %q, %v", buf[:n], err)
	}
	if _, err := b.List(ctx, "private"); !errors.Is(err, backend.ErrPermission) {
		t.Errorf("List(private) as uid 1000 = %v, want ErrPermission", err)
	}
	root := backendtest.OpenOptions(t, g.URL, backend.Options{}) // uid 0, No_Root_Squash
	if n, err := root.ReadAt(ctx, "secret", "", buf, 0); err != io.EOF || string(buf[:n]) != "root only" {
		t.Errorf("ReadAt(secret) as root = %q, %v", buf[:n], err)
	}
	if backend.Retries(b) != 0 || backend.Retries(root) != 0 {
		t.Errorf("retries on refusals: %d, %d (refusals are not transient)", backend.Retries(b), backend.Retries(root))
	}
}

// TestNFSGaneshaReplacedByRename: a file replaced by a rename while the old
// one lives on (a hard link keeps it) is read through its new handle by a
// caller that asks for the new version, though the old handle was cached;
// a caller with the old version gets ErrChanged once the path names the
// new file.
func TestNFSGaneshaReplacedByRename(t *testing.T) {
	if testing.Short() {
		t.Skip("real server: not in -short mode")
	}
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"f": []byte("old bytes")})
	g := nfs.StartGanesha(t, dir)
	ctx := context.Background()
	b := backendtest.OpenOptions(t, g.URL, backend.Options{})
	other := backendtest.OpenOptions(t, g.URL, backend.Options{}) // its own handle cache
	old, err := b.Stat(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := b.ReadAt(ctx, "f", old.Version, buf, 0); err != io.EOF || string(buf[:n]) != "old bytes" {
		t.Fatalf("first read = %q, %v", buf[:n], err)
	}
	if err := os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "keep")); err != nil {
		t.Fatal(err)
	}
	backendtest.WriteFiles(t, dir, map[string][]byte{".new": []byte("new bytes!")})
	if err := os.Rename(filepath.Join(dir, ".new"), filepath.Join(dir, "f")); err != nil {
		t.Fatal(err)
	}
	cur, err := other.Stat(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Version == old.Version {
		t.Fatalf("version %q did not change with the rename", cur.Version)
	}
	if n, err := b.ReadAt(ctx, "f", cur.Version, buf, 0); err != io.EOF || string(buf[:n]) != "new bytes!" {
		t.Fatalf("read of the new version through a cached handle = %q, %v; want the new bytes", buf[:n], err)
	}
	if _, err := b.ReadAt(ctx, "f", old.Version, buf, 0); !errors.Is(err, backend.ErrChanged) {
		t.Fatalf("read of the old version after the rename = %v, want ErrChanged", err)
	}
}

// mirrorModifiers rewrites a file in every replica of a mirror a test made.
var mirrorModifiers backendtest.Modifiers

// TestMirrorNFSPosixConformance: an nfs replica (go-nfs) and a posix one
// make a mirror that passes the suite, and its reads still succeed once
// the nfs server is gone.
func TestMirrorNFSPosixConformance(t *testing.T) {
	mk := func(t *testing.T, files map[string][]byte) backend.Backend {
		a, b := t.TempDir(), t.TempDir()
		backendtest.WriteFiles(t, a, files)
		backendtest.WriteFiles(t, b, files)
		m := backendtest.OpenOptions(t, "mirror:"+goNFS(t, a)+","+b, backend.Options{})
		mirrorModifiers.Add(m, func(t *testing.T, p string, data []byte) {
			backendtest.WriteFiles(t, a, map[string][]byte{p: data})
			backendtest.WriteFiles(t, b, map[string][]byte{p: data})
		})
		return m
	}
	backendtest.Run(t, mk, backendtest.WithModify(mirrorModifiers.Modify))

	a, dir := t.TempDir(), t.TempDir()
	files := map[string][]byte{"x/f": []byte("same bytes")}
	backendtest.WriteFiles(t, a, files)
	backendtest.WriteFiles(t, dir, files)
	px := startTCPProxy(t, nfs.StartGoNFS(t, a, 1024).Host)
	m := backendtest.OpenOptions(t, "mirror:nfs://"+px.addr()+"/export,"+dir, backend.Options{
		RequestTimeout: 300 * time.Millisecond,
		Retry:          backend.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond},
	})
	ctx := context.Background()
	e, err := m.Stat(ctx, "x/f")
	if err != nil {
		t.Fatal(err)
	}
	px.set("127.0.0.1:1", false) // nothing listens there: refused
	px.cut()
	buf := make([]byte, 32)
	if n, err := m.ReadAt(ctx, "x/f", e.Version, buf, 0); err != io.EOF || string(buf[:n]) != "same bytes" {
		t.Fatalf("read with the nfs replica down = %q, %v; want the posix replica's bytes", buf[:n], err)
	}
}

// TestNFSLargeDirectory lists a directory of many pages of READDIRPLUS,
// on go-nfs and on Ganesha.
func TestNFSLargeDirectory(t *testing.T) {
	dir := t.TempDir()
	const n = 4000 // over 3,000 entries fill a 512 KiB page
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, "file-with-a-longish-name-"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	urls := []string{nfs.StartGoNFS(t, dir, 2*n).URL}
	if !testing.Short() {
		urls = append(urls, nfs.StartGanesha(t, dir).URL)
	}
	for _, u := range urls {
		b := backendtest.OpenOptions(t, u, backend.Options{})
		start := time.Now()
		es, err := b.List(context.Background(), "")
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		t.Logf("%s: listed %d entries in %v", u, len(es), time.Since(start))
		if len(es) != n {
			t.Fatalf("%s: %d entries, want %d", u, len(es), n)
		}
		for i := 1; i < len(es); i++ {
			if es[i-1].Name >= es[i].Name {
				t.Fatalf("%s: not sorted at %d: %q, %q", u, i, es[i-1].Name, es[i].Name)
			}
		}
	}
}
