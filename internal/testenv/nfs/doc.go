// Package nfs starts NFSv3 servers for tests: NFS-Ganesha, the real
// server, in a network namespace of its own (StartGanesha), and go-nfs in
// process for the fast unit tests (StartGoNFS). Each is stopped in the
// test's t.Cleanup; a missing Ganesha skips the test, or fails it under
// CI=true.
//
// It knows nothing of EpochFS's NFS client (pkg/backend): it is the far
// side of it.
package nfs
