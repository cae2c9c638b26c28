package nfs

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	gonfs "github.com/willscott/go-nfs"
	nfshelper "github.com/willscott/go-nfs/helpers"
)

// GoNFS is an in-process NFSv3 server (github.com/willscott/go-nfs) serving
// one directory on 127.0.0.1, MOUNT and NFS on one port and no portmapper:
// the fast server of the nfs backend's unit tests. NFS-Ganesha, the real
// server, is StartGanesha.
type GoNFS struct {
	// Host is "127.0.0.1:PORT".
	Host string
	// URL is the dataset's source URL, nfs://127.0.0.1:PORT/export (go-nfs
	// serves the directory whatever export path the client mounts).
	URL string
}

// quietGoNFS sets go-nfs's package-wide log level once, before any server.
var quietGoNFS sync.Once

// StartGoNFS serves dir over NFSv3 on a free 127.0.0.1 port until the end
// of the test. handles bounds the server's file handle cache: give it more
// than the number of files and directories a test reaches, since a handle
// it evicts is stale for the client.
func StartGoNFS(t testing.TB, dir string, handles int) *GoNFS {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("nfs: go-nfs listen: %v", err)
	}
	quietGoNFS.Do(func() { gonfs.Log.SetLevel(gonfs.ErrorLevel) })
	handler := nfshelper.NewCachingHandler(nfshelper.NewNullAuthHandler(osfs.New(dir)), max(handles, 1024))
	ctx, cancel := context.WithCancel(context.Background())
	srv := &gonfs.Server{Handler: handler, Context: ctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		cancel()
		l.Close()
		<-done
	})
	host := l.Addr().String()
	return &GoNFS{Host: host, URL: "nfs://" + host + "/export"}
}
