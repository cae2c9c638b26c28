// Package mountapi is the contract between a `cachefs mount` process and the
// programs that start and drive it (the CSI node plugin, the cachefs CLI,
// benchmarks and tests): the mount's flag names, CommandOptions and its
// Args, the credential pipe format (--credentials-fd), and the protocol of
// the control socket in the cache directory with its client.
//
// It is a leaf: the standard library only. It must not know how a mount
// serves (FUSE, the cache, backends, manifests): pkg/mount implements the
// serving side and imports this package, so a program that only starts or
// asks mounts links none of that.
package mountapi
