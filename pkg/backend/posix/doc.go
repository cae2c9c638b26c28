// Package posix is the backend of a local or kernel-mounted directory
// (/abs/path or file:///abs/path). It serves the directory through
// os.OpenRoot, so symlinks and ".." cannot escape it, and reports versions
// as "MTIMENANOS-SIZE-CTIMENANOS-INO". It also stores small objects (Put)
// for metadata kept next to the dataset.
//
// It knows only pkg/backend's contract and the standard library: nothing of
// caching, FUSE, CSI or the other backends.
package posix
