package backend

import "strconv"

// FileVersion is the Entry.Version of a file in a file system source
// (posix, cephfs, nfs): "MTIMENANOS-SIZE-CTIMENANOS-INO", the inode being
// NFS's file id. The ctime and inode change when a file is replaced or
// rewritten in place with the same size and mtime, which mtime and size
// alone would miss.
func FileVersion(mtimeNanos int64, size uint64, ctimeNanos int64, ino uint64) string {
	v := make([]byte, 0, 64)
	v = strconv.AppendInt(v, mtimeNanos, 10)
	v = append(v, '-')
	v = strconv.AppendUint(v, size, 10)
	v = append(v, '-')
	v = strconv.AppendInt(v, ctimeNanos, 10)
	v = append(v, '-')
	v = strconv.AppendUint(v, ino, 10)
	return string(v)
}
