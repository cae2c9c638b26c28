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
// It holds mu while it removes: a start runs with mu held and a dataset is
// recorded from its first successful start until its process is stopped,
// so the log of an unrecorded dataset has no writer and no reader then.
// (With finer locking, a dataset being started must count as recorded.)
func (n *nodeState) maintainMountLogs() {
	dir := filepath.Join(n.cfg.dir, "logs")
	var live []string
	n.mu.Lock()
	ents, err := os.ReadDir(dir)
	if err != nil {
		n.mu.Unlock()
		n.cfg.log.Warn("cannot read the mount logs", "dir", dir, "err", err)
		return
	}
	for _, e := range ents {
		key, ok := strings.CutSuffix(strings.TrimSuffix(e.Name(), rotatedSuffix), ".log")
		if ok && n.datasets[key] != nil {
			continue
		}
		// A released dataset's log, or a temp file of an interrupted rotation.
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			n.cfg.log.Warn("cannot remove the log of a dataset no longer staged", "file", p, "err", err)
		}
	}
	for key := range n.datasets {
		live = append(live, n.logPath(key))
	}
	n.mu.Unlock()
	for _, p := range live {
		if err := rotateLog(p, n.cfg.mountLogMaxSize); err != nil {
			n.cfg.log.Warn("cannot rotate a mount log", "file", p, "err", err)
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
