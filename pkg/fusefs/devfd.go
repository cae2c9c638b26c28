package fusefs

import (
	"os"
	"slices"
	"strconv"
	"sync"
)

// go-fuse v2.12.1 keeps the /dev/fuse descriptor of a Server unexported,
// and a handover (pkg/handover) must pass it on. So Mount finds it as the
// /dev/fuse descriptor that appears in the process while go-fuse mounts;
// devFdMu makes the mounts of one process (tests) take turns at it, so
// that exactly one appears. Hand-written: no library reads it out, and
// copying go-fuse's mount code to own the descriptor is what we avoid.
var devFdMu sync.Mutex

// newServerFd runs newServer and returns the /dev/fuse descriptor it
// opened (-1 when it cannot be told).
func newServerFd[S any](newServer func() (S, error)) (int, S, error) {
	devFdMu.Lock()
	defer devFdMu.Unlock()
	before := fuseFds()
	s, err := newServer()
	if err != nil {
		return -1, s, err
	}
	var opened []int
	for _, fd := range fuseFds() {
		if !slices.Contains(before, fd) {
			opened = append(opened, fd)
		}
	}
	if len(opened) != 1 {
		return -1, s, nil
	}
	return opened[0], s, nil
}

// fuseFds lists the process's descriptors open on /dev/fuse.
func fuseFds() []int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var fds []int
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				fds = append(fds, fd)
			}
		}
	}
	return fds
}
