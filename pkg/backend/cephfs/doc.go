// Package cephfs is the backend of a CephFS directory through libcephfs
// (github.com/ceph/go-ceph, cgo). It is built only with
// `-tags ceph,pacific` (make build-ceph); the default cgo-free build has
// cephfs_stub.go instead, whose Open returns backend.ErrUnsupported, and
// Built tells the two apart.
//
// It knows only pkg/backend's contract and go-ceph: nothing of caching,
// FUSE, CSI or the other backends.
package cephfs
