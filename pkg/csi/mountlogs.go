package csi

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// Mount logs: each mount process appends (O_APPEND, opened by the launcher)
// to <state>/node/logs/<key>.log. The health loop caps them with
// maintainMountLogs: a log over Config.MountLogMaxSize is copied to
// <key>.log.1 (replacing the previous one) and truncated, which is safe
// with O_APPEND writers: their next line lands at the new end. Lines
// written between the copy and the truncation are lost. The logs of
// datasets the node no longer records (released, or whose first start
// failed) are removed.

// minMountLogMaxSize is the smallest cap: a mount's start and failure lines
// must fit.
const minMountLogMaxSize = 64 << 10

// rotatedSuffix names the one rotated copy of a mount log.
const rotatedSuffix = ".1"

// maintainMountLogs removes the logs of datasets the node does not record,
// and rotates the others when over n.cfg.mountLogMaxSize. Called by the
// health loop.
//
// A dataset whose first start is in progress is not recorded yet but holds
// its dataset lock: its log is skipped (tryLock), and removed under that
// lock only once it is still unrecorded, so a log is never removed while
// a process writes it or a start reads it.
func (n *nodeState) maintainMountLogs() {
	dir := filepath.Join(n.cfg.dir, "logs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		n.cfg.log.Warn("cannot read the mount logs", "dir", dir, "err", err)
		return
	}
	for _, e := range ents {
		key, ok := strings.CutSuffix(strings.TrimSuffix(e.Name(), rotatedSuffix), ".log")
		if ok && n.dataset(key) != nil {
			continue
		}
		if ok {
			unlock, free := n.dsLocks.tryLock(key)
			if !free {
				continue // starting or stopping right now
			}
			if n.dataset(key) != nil {
				unlock()
				continue
			}
			n.removeLog(key)
			unlock()
			continue
		}
		// A temp file of an interrupted rotation.
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			n.cfg.log.Warn("cannot remove a stale mount log file", "file", p, "err", err)
		}
	}
	for _, key := range n.datasetKeys() {
		if err := rotateLog(n.logPath(key), n.cfg.mountLogMaxSize); err != nil {
			n.cfg.log.Warn("cannot rotate a mount log", "key", key, "err", err)
		}
	}
}

// removeLog removes dataset key's log and its rotated copy. Called with the
// dataset's lock held, once its process is gone.
func (n *nodeState) removeLog(key string) {
	for _, p := range []string{n.logPath(key), n.logPath(key) + rotatedSuffix} {
		if err := removeFile(p); err != nil {
			n.cfg.log.Warn("cannot remove the log of a dataset no longer staged", "file", p, "err", err)
		}
	}
}

// rotateLog copies path to path.1 (atomically replacing it) and truncates
// path, when path is larger than max.
func rotateLog(path string, max int64) error {
	if max <= 0 {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() <= max {
		return nil // a dataset that has not logged yet has no log
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := renameio.NewPendingFile(path+rotatedSuffix, renameio.WithTempDir(filepath.Dir(path)), renameio.WithPermissions(0o600))
	if err != nil {
		return err
	}
	defer func() { _ = dst.Cleanup() }()
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("copy to %s: %w", path+rotatedSuffix, err)
	}
	if err := dst.CloseAtomicallyReplace(); err != nil {
		return err
	}
	return os.Truncate(path, 0)
}
