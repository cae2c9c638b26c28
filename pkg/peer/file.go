package peer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/renameio/v2"
)

// File is a Membership read from a file that another program rewrites:
// `cachefs mount --peers-file`, which the CSI node plugin keeps up to date
// from Kubernetes discovery (pkg/csi, docs/DESIGN.md "Discovery"), so that
// the mount process itself needs no Kubernetes credentials. The file holds
// the --peers syntax, id=host:port separated by commas or newlines ('#'
// starts a comment line). It is watched (github.com/fsnotify/fsnotify on
// its directory, since a writer replaces it by a rename): a changed file
// replaces the list; an unreadable, empty or malformed one keeps the last
// good list (a writer replaces it atomically, WritePeersFile, so a reader
// never sees half).
//
// path is immutable; cur and last are replaced whole, atomically. Only the
// follow goroutine reloads after OpenFile returns.
type File struct {
	path     string
	cur      atomic.Pointer[[]Peer]
	last     atomic.Pointer[[]byte]
	onReload func(error) // tests: called after each reload attempt of follow
}

// DefaultFilePoll is how often a File reads its file when it cannot watch
// it, and how often it checks that its watch still stands.
const DefaultFilePoll = time.Second

// OpenFile reads path (which must hold a valid list: the mount must start
// with its peers) and, until ctx is done, reloads it whenever its directory
// reports a change to it. Where the directory cannot be watched (no inotify
// instance left, the directory removed), it reads the file every poll (0:
// DefaultFilePoll) instead, and watches again once it can.
func OpenFile(ctx context.Context, path string, poll time.Duration) (*File, error) {
	return openFile(ctx, path, poll, nil)
}

func openFile(ctx context.Context, path string, poll time.Duration, onReload func(error)) (*File, error) {
	f := &File{path: filepath.Clean(path), onReload: onReload}
	if poll <= 0 {
		poll = DefaultFilePoll
	}
	w := f.watch() // before the first read, so no rewrite falls between
	if err := f.reload(); err != nil {
		if w != nil {
			w.Close()
		}
		return nil, err
	}
	go f.follow(ctx, w, poll)
	return f, nil
}

// Peers returns the current list (shared; never modified).
func (f *File) Peers() []Peer { return *f.cur.Load() }

// watch returns a watcher of f's directory, or nil when there is none to
// be had (then follow polls).
func (f *File) watch() *fsnotify.Watcher {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil
	}
	if err := w.Add(filepath.Dir(f.path)); err != nil {
		w.Close()
		return nil
	}
	return w
}

// follow reloads f on each change its watcher w reports, until ctx ends.
// inotify drops no event in a watched directory except on a queue overflow
// (an error here: reload) or when the watch itself ends (directory removed,
// moved or unmounted; an unmount ends it without an event), so the ticker
// only checks that the watch stands, and reads the file only while it does
// not.
func (f *File) follow(ctx context.Context, w *fsnotify.Watcher, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if w != nil {
			events, errs = w.Events, w.Errors
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				w = nil // closed under us: poll
				continue
			}
			if filepath.Clean(ev.Name) != f.path || !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Write) {
				continue // another file, or this one going away (the last good list stays)
			}
		case _, ok := <-errs:
			if !ok {
				w = nil
				continue
			}
			// an overflow (or a read error of the watcher): events may be lost
		case <-t.C:
			if w != nil && len(w.WatchList()) > 0 {
				continue // watched: nothing to read
			}
			if w != nil {
				w.Close()
			}
			w = f.watch() // again once the directory is back; read the file either way
		}
		err := f.reload() // on an error, the last good list stays
		if f.onReload != nil {
			f.onReload(err)
		}
	}
}

func (f *File) reload() error {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("peers file: %w", err)
	}
	if last := f.last.Load(); last != nil && bytes.Equal(*last, b) {
		return nil
	}
	list, err := ParsePeersFile(string(b))
	if err != nil {
		return fmt.Errorf("peers file %s: %w", f.path, err)
	}
	f.cur.Store(&list)
	f.last.Store(&b)
	return nil
}

// ParsePeersFile parses a peers file: ParsePeers over its lines, '#'
// comment lines left out.
func ParsePeersFile(s string) ([]Peer, error) {
	var items []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		items = append(items, line)
	}
	return ParsePeers(strings.Join(items, ","))
}

// FormatPeers is the --peers (and peers file) form of a list.
func FormatPeers(peers []Peer) string {
	var b strings.Builder
	for i, p := range peers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(FormatPeer(p))
	}
	return b.String()
}

// FormatPeer is one peer in the --peers syntax: id=host:port, with
// ;capacity=BYTES when it advertises one.
func FormatPeer(p Peer) string {
	s := p.ID + "=" + p.Addr
	if p.Capacity > 0 {
		s += ";capacity=" + strconv.FormatInt(p.Capacity, 10)
	}
	return s
}

// WritePeersFile replaces path with peers (one per line) atomically, mode
// 0644 whatever the umask (the mount process reads it): renameio writes a
// temporary file in its directory, syncs it, then renames it over path.
func WritePeersFile(path string, peers []Peer) error {
	var b strings.Builder
	b.WriteString("# cachefs peers: written by the EpochFS node plugin; cachefs mount --peers-file reloads it\n")
	for _, p := range peers {
		b.WriteString(FormatPeer(p) + "\n")
	}
	return renameio.WriteFile(path, []byte(b.String()), 0o644, renameio.IgnoreUmask(), renameio.WithTempDir(filepath.Dir(path)))
}
