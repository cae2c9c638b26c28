package nfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// READDIRPLUS page sizes: directory bytes and whole reply bytes.
const (
	nfsDirCount = 64 << 10
	nfsMaxCount = 512 << 10
)

func (b *nfsBackend) List(ctx context.Context, p string) ([]backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nfs: list %q: %w", p, err)
	}
	l := &nfsListing{g: backend.NewListGuard(ctx, p)} // the caps (listlimit.go)
	defer l.g.Release()
	err = b.do(ctx, "list", func(ctx context.Context, c *rpcConn, root []byte) error {
		l.reset()
		var a nfsc.Fattr
		dir, err := b.resolve(ctx, c, root, p, &a)
		if err != nil {
			return err
		}
		switch {
		case a.Type == nfsc.NF3Lnk:
			return &nfsStatError{op: "lookup", stat: nfsc.NFS3ErrNoEnt}
		case a.Type != nfsc.NF3Dir:
			return errNFSNotDir
		}
		if err := b.readDirPlus(ctx, c, dir, l); err != nil {
			return err
		}
		return b.lookupMissing(ctx, c, dir, l)
	})
	if err != nil {
		if errors.Is(err, errNFSNotDir) {
			return nil, fmt.Errorf("nfs: list %q: %w", p, backend.ErrNotDir)
		}
		if lim := (*backend.ListLimitError)(nil); errors.As(err, &lim) {
			return nil, fmt.Errorf("nfs: list: %w", lim)
		}
		return nil, b.mapErr("list", p, err)
	}
	return b.listed(p, l), nil
}

// nfsListing gathers one List attempt's children; a retry resets it. Used by
// that List's goroutine only.
type nfsListing struct {
	g       *backend.ListGuard
	out     []backend.Entry // by position: kids[i] is out[i]
	kids    []nfsKid
	skipped []string // "name\x00why"
}

// nfsKid is one child as READDIRPLUS (or a LOOKUP after it) described it;
// typ 0 means not known yet, nfsGone removed since the listing.
type nfsKid struct {
	name string
	fh   []byte
	typ  uint32
}

const nfsGone = 0xffff

func (l *nfsListing) reset() {
	l.out, l.kids, l.skipped = l.out[:0], l.kids[:0], l.skipped[:0]
	l.g.Restart()
}

// readDirPlus reads directory dir page by page into l.
func (b *nfsBackend) readDirPlus(ctx context.Context, c *rpcConn, dir []byte, l *nfsListing) error {
	var cookie uint64
	var verf [8]byte
	prevCookie := cookie
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.g.Page(); err != nil {
			return err
		}
		eof := false
		err := c.call(ctx, b.timeout, b.auth, nfsc.Nfs3Prog, nfsc.Nfs3Vers, nfsc.NFSProc3ReadDirPlus,
			func(e *xdrEnc) {
				e.opaque(dir)
				e.u64(cookie)
				e.b = append(e.b, verf[:]...)
				e.u32(nfsDirCount)
				e.u32(nfsMaxCount)
			},
			func(r *bytes.Reader) (err error) {
				eof, err = l.decodePage(r, &cookie, &verf)
				return err
			})
		if err != nil {
			return err
		}
		if eof {
			return nil
		}
		if cookie == prevCookie {
			// A page that moved nothing on and is not the last: a
			// broken server; do not loop forever.
			return fmt.Errorf("%w: READDIRPLUS made no progress (cookie %d)", errTransport, cookie)
		}
		prevCookie = cookie
	}
}

// decodePage adds the entries of one READDIRPLUS reply to l, advancing
// cookie and verf, and reports whether it was the last page.
func (l *nfsListing) decodePage(r *bytes.Reader, cookie *uint64, verf *[8]byte) (eof bool, err error) {
	if err := nfsStatus(r, "readdirplus"); err != nil {
		return false, err
	}
	var dattr nfsc.PostOpAttr
	if err := xdr.Read(r, &dattr); err != nil {
		return false, err
	}
	if _, err := io.ReadFull(r, verf[:]); err != nil {
		return false, err
	}
	for {
		follows, err := xdr.ReadUint32(r)
		if err != nil {
			return false, err
		}
		if follows == 0 {
			break
		}
		var ent nfsc.EntryPlus
		if err := xdr.Read(r, &ent); err != nil {
			return false, err
		}
		*cookie = ent.Cookie
		if err := l.add(&ent); err != nil {
			return false, err // stops the loop: no further page is asked for
		}
	}
	e, err := xdr.ReadUint32(r)
	return e != 0, err
}

// add records one entry of a READDIRPLUS reply, or the name it skips.
func (l *nfsListing) add(ent *nfsc.EntryPlus) error {
	name := ent.FileName
	if name == "." || name == ".." {
		return nil
	}
	if !source.ValidName(name) {
		l.skipped = append(l.skipped, name+"\x00not a valid file name")
		return nil
	}
	var fh []byte
	if ent.Handle.IsSet {
		fh = ent.Handle.FH
	}
	if err := l.g.Entry(name, ""); err != nil {
		return err
	}
	var typ uint32
	if ent.Attr.IsSet {
		typ = ent.Attr.Attr.Type
		l.out = append(l.out, nfsEntry(name, &ent.Attr.Attr))
	} else {
		l.out = append(l.out, backend.Entry{Name: name}) // filled in by lookupMissing
	}
	l.kids = append(l.kids, nfsKid{name: name, fh: fh, typ: typ})
	return nil
}

// lookupMissing LOOKUPs the entries the server sent without attributes
// (or handles).
func (b *nfsBackend) lookupMissing(ctx context.Context, c *rpcConn, dir []byte, l *nfsListing) error {
	for i := range l.kids {
		k := &l.kids[i]
		if k.typ != 0 && k.fh != nil {
			continue
		}
		var a nfsc.Fattr
		fh, err := b.lookup(ctx, c, dir, k.name, &a)
		if err != nil {
			if isNotExist(err) {
				k.typ = nfsGone
				continue
			}
			return err
		}
		k.fh, k.typ = fh, a.Type
		l.out[i] = nfsEntry(k.name, &a)
	}
	return nil
}

// listed logs the skipped names of directory p, remembers the handles of
// its files and directories, and returns those sorted by name.
func (b *nfsBackend) listed(p string, l *nfsListing) []backend.Entry {
	for _, s := range l.skipped {
		name, why, _ := strings.Cut(s, "\x00")
		b.skip(p, name, why)
	}
	res := l.out[:0]
	for i, e := range l.out {
		k := l.kids[i]
		switch k.typ {
		case nfsc.NF3Reg, nfsc.NF3Dir:
			b.remember(backend.JoinPath(p, k.name), k.fh, k.typ)
			res = append(res, e)
		case nfsGone:
		case nfsc.NF3Lnk:
			b.skip(p, k.name, "a symlink (not followed)")
		default:
			b.skip(p, k.name, "not a regular file or directory")
		}
	}
	slices.SortFunc(res, func(x, y backend.Entry) int { return strings.Compare(x.Name, y.Name) })
	return res
}

var errNFSNotDir = errors.New("not a directory")

func isNotExist(err error) bool {
	var se *nfsStatError
	return errors.As(err, &se) && se.stat == nfsc.NFS3ErrNoEnt
}

func (b *nfsBackend) skip(dir, name, why string) {
	b.skipped.Add(1)
	b.log.Warn("skipping directory entry", slog.String("path", strconv.Quote(backend.JoinPath(dir, name))), slog.String("reason", why))
}
