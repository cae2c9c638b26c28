package peer

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// diskReader serves files of a directory as the mount's cache does on a
// hit: open the entry file, read it into a buffer, close.
type diskReader struct{ dir string }

func (r diskReader) ReadForPeer(ctx context.Context, path, version string, size, off, n int64) ([]byte, error) {
	f, err := os.Open(filepath.Join(r.dir, path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

type benchFile struct {
	path string
	size int64
	sum  [32]byte
}

// benchFiles writes n files of log-normal sizes (median 20 kB, 1–200 kB:
// bench-cluster's data).
func benchFiles(b *testing.B, n int) (string, []benchFile) {
	dir := b.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	var fs []benchFile
	for i := range n {
		sz := min(max(int64(20_000*math.Exp(r.NormFloat64())), 1000), 200_000)
		data := make([]byte, sz)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		p := fmt.Sprintf("f%05d", i)
		if err := os.WriteFile(filepath.Join(dir, p), data, 0o600); err != nil {
			b.Fatal(err)
		}
		fs = append(fs, benchFile{path: p, size: sz, sum: sha256.Sum256(data)})
	}
	return dir, fs
}

// BenchmarkRead compares one whole-file read from the local cache
// directory (the reader a cache hit without FUSE passthrough uses) with the
// same read asked of a peer server over loopback (Cluster.Read: HTTP, the
// owner's read, xxh3 and the manifest's sha256 checked). Files/s is
// b.N/s; run with -cpu to vary the parallel readers.
func BenchmarkRead(b *testing.B) {
	dir, files := benchFiles(b, 1000)
	sums := map[string][]byte{}
	for _, f := range files {
		sums[f.path] = f.sum[:]
	}
	rd := diskReader{dir}
	b.Run("local", func(b *testing.B) {
		var next atomic.Int64
		b.SetParallelism(4)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f := files[next.Add(1)%int64(len(files))]
				p := make([]byte, f.size)
				data, err := rd.ReadForPeer(context.Background(), f.path, "v1", f.size, 0, f.size)
				if err != nil {
					b.Fatal(err)
				}
				copy(p, data)
			}
		})
	})
	for _, proto := range []string{"http1", "h2c", "transport"} {
		b.Run("peer-"+proto, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv := NewServer(ServerOptions{Dataset: "ds", Group: group, Token: token, Reader: rd})
			addr, err := Listen(ctx, "127.0.0.1:0", srv)
			if err != nil {
				b.Fatal(err)
			}
			if proto == "h2c" { // Listen serves HTTP/1.1 only
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				hs := &http.Server{Handler: srv, Protocols: new(http.Protocols)}
				hs.Protocols.SetUnencryptedHTTP2(true)
				go func() { _ = hs.Serve(ln) }()
				defer hs.Close()
				addr = ln.Addr().String()
			}
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.MaxIdleConnsPerHost = 64
			t.Protocols = new(http.Protocols)
			if proto == "h2c" {
				t.Protocols.SetUnencryptedHTTP2(true)
			} else {
				t.Protocols.SetHTTP1(true)
			}
			var rt http.RoundTripper = t
			if proto == "transport" {
				rt = nil
			}
			c, err := NewCluster(ClientOptions{Self: "self", Dataset: "ds", Group: group, Token: token, Transport: rt,
				Members: Static{{ID: "owner", Addr: addr}}, Checksum: func(p string) []byte { return sums[p] }})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(4)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					f := files[next.Add(1)%int64(len(files))]
					p := make([]byte, f.size)
					if err := c.Read(context.Background(), f.path, "v1", f.size, 0, p); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
