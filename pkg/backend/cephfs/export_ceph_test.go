//go:build ceph

package cephfs

// SetCephMounts sets the number of libcephfs mounts each cephfs backend
// opens from now on and returns a func restoring the previous number.
func SetCephMounts(n int) (restore func()) {
	old := cephMounts
	cephMounts = n
	return func() { cephMounts = old }
}
