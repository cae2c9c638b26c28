// Package nfs is the backend of an NFSv3 export read with a pure-Go client:
// no kernel NFS client and no mount on the node. go-nfs-client supplies the
// protocol types; this package has its own RPC transport (rpc.go), asks the
// portmapper for the ports (portmap.go), MOUNTs the export (mount.go),
// caches file handles (handles.go), lists with READDIRPLUS (list.go) and
// reads over a pool of connections (read.go).
//
// It knows only pkg/backend's contract: nothing of caching, FUSE, CSI or the
// other backends.
package nfs
