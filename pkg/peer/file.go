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
)

// File is a Membership read from a file that another program rewrites:
// `cachefs mount --peers-file`, which the CSI node plugin keeps up to date
// from Kubernetes discovery (pkg/csi, docs/DESIGN.md "Discovery"), so that
// the mount process itself needs no Kubernetes credentials. The file holds
// the --peers syntax, id=host:port separated by commas or newlines ('#'
// starts a comment line). It is polled: a changed file replaces the list;
// an unreadable, empty or malformed one keeps the last good list (a writer
// replaces it atomically, WritePeersFile, so a reader never sees half).
type File struct {
	path string
	cur  atomic.Pointer[[]Peer]
	last atomic.Pointer[[]byte]
}

// DefaultFilePoll is how often a File looks for a new list.
const DefaultFilePoll = time.Second

// OpenFile reads path (which must hold a valid list: the mount must start
// with its peers) and, until ctx is done, polls it every poll (0:
// DefaultFilePoll).
func OpenFile(ctx context.Context, path string, poll time.Duration) (*File, error) {
	f := &File{path: path}
	if err := f.reload(); err != nil {
		return nil, err
	}
	if poll <= 0 {
		poll = DefaultFilePoll
	}
	go func() {
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = f.reload() // the last good list stays
			}
		}
	}()
	return f, nil
}

// Peers returns the current list (shared; never modified).
func (f *File) Peers() []Peer { return *f.cur.Load() }

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

// WritePeersFile replaces path with peers (one per line) atomically: a
// temporary file in its directory, then a rename.
func WritePeersFile(path string, peers []Peer) error {
	var b strings.Builder
	b.WriteString("# cachefs peers: written by the EpochFS node plugin; cachefs mount --peers-file reloads it\n")
	for _, p := range peers {
		b.WriteString(FormatPeer(p) + "\n")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".peers-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
