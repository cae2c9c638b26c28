// Package imagebuild builds the project's container images on
// github.com/google/go-containerregistry: layers (this file), an image of
// layers and a config, written as a Docker-archive tar (image.go; the
// format of `docker save`, which `ctr images import` and `docker load`
// read), and the push of such a tar to a registry (push.go). `make images`
// and `make image-push` (internal/cmd/mkimage) and the test cluster
// (internal/testenv/cluster) use it.
//
// Hand-written here, on archive/tar, is only what go-containerregistry
// does not do: a layer tar from a list of entries owned by root with fixed
// times (its crane.Layer takes file contents only: no modes, directories or
// symlinks), and a layer from a root-filesystem tar with its device nodes
// left out. Layers are reproducible: entries sorted by name, owned by root
// (layers from a rootfs tar keep their owners), every time set to ModTime,
// stored gzip-compressed (BestSpeed) as the registry and the archive carry
// them.
//
// It knows nothing about what goes into the images (that is mkimage's and
// the tests' business).
package imagebuild

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ModTime is the modification time of every entry of a layer written from
// Entries (layers from a rootfs tar keep the tar's times).
var ModTime = time.Unix(0, 0).UTC()

// An Entry is one file, directory or symlink of a layer.
type Entry struct {
	// Name is the slash-separated path in the image, without a leading
	// slash ("usr/local/bin/cachefs").
	Name string
	// Mode holds the permission bits and fs.ModeDir or fs.ModeSymlink
	// (neither: a regular file).
	Mode fs.FileMode
	// Src is the file whose contents a regular file gets; when empty, Data.
	Src  string
	Data []byte
	// Link is a symlink's target.
	Link string
}

// Dir, File and Symlink make Entries.
func Dir(name string) Entry { return Entry{Name: name, Mode: fs.ModeDir | 0o755} }
func File(name, src string, perm fs.FileMode) Entry {
	return Entry{Name: name, Mode: perm, Src: src}
}
func Symlink(name, target string) Entry {
	return Entry{Name: name, Mode: fs.ModeSymlink | 0o777, Link: target}
}

// DirEntries returns the tree under root as Entries (regular files,
// directories and symlinks; anything else is an error), named relative to
// root with prefix prepended ("" or "usr/local").
func DirEntries(root, prefix string) ([]Entry, error) {
	var entries []Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := Entry{Name: path.Join(prefix, filepath.ToSlash(rel)), Mode: info.Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
		switch {
		case info.Mode().IsRegular():
			e.Src = p
		case info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("imagebuild: %s: not a file, directory or symlink", p)
		}
		entries = append(entries, e)
		return nil
	})
	return entries, err
}

// WriteLayer writes entries, sorted by name, as a gzip-compressed layer
// tar at path and returns it as a layer (read from path: keep the file
// until the image is written).
func WriteLayer(path string, entries []Entry) (v1.Layer, error) {
	sorted := append([]Entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	return writeLayerFile(path, func(tw *tar.Writer) error {
		for _, e := range sorted {
			if err := writeEntry(tw, e); err != nil {
				return fmt.Errorf("imagebuild: %s: %w", e.Name, err)
			}
		}
		return nil
	})
}

func writeEntry(tw *tar.Writer, e Entry) error {
	name := strings.TrimPrefix(path.Clean("/"+e.Name), "/")
	if name == "" {
		return errors.New("empty name")
	}
	hdr := &tar.Header{
		Name: name, Mode: tarMode(e.Mode), ModTime: ModTime,
		Uname: "root", Gname: "root", Format: tar.FormatPAX,
	}
	var data []byte
	var src *os.File
	switch {
	case e.Mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case e.Mode&fs.ModeSymlink != 0:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Link
	case e.Mode.IsRegular():
		hdr.Typeflag = tar.TypeReg
		if e.Src == "" {
			data, hdr.Size = e.Data, int64(len(e.Data))
			break
		}
		f, err := os.Open(e.Src)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		src, hdr.Size = f, st.Size()
	default:
		return fmt.Errorf("mode %v: not a file, directory or symlink", e.Mode)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if src != nil {
		n, err := io.Copy(tw, src)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed while written (%d of %d bytes)", e.Src, n, hdr.Size)
		}
		return err
	}
	_, err := tw.Write(data)
	return err
}

// tarMode is m's permission, setuid, setgid and sticky bits as a tar mode.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	for bit, t := range map[fs.FileMode]int64{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&bit != 0 {
			mode |= t
		}
	}
	return mode
}

// RootfsLayer writes the root-filesystem tar read from r (mmdebstrap's
// output: names starting "./", device nodes in /dev) as a layer tar at
// path (gzip-compressed, as WriteLayer): names without "./", owners,
// modes, times and extended attributes kept, and every entry for which drop
// returns true left out (drop may be nil; it sees the cleaned name,
// directories without a trailing slash). Device nodes and FIFOs are always
// left out: the runtime makes /dev.
func RootfsLayer(path string, r io.Reader, drop func(name string) bool) (v1.Layer, error) {
	return writeLayerFile(path, func(tw *tar.Writer) error {
		tr := tar.NewReader(r)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("imagebuild: rootfs tar: %w", err)
			}
			name := cleanName(hdr.Name)
			if name == "" {
				continue // "./" itself
			}
			switch hdr.Typeflag {
			case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
				continue
			}
			if drop != nil && drop(name) {
				continue
			}
			hdr.Name = name
			if hdr.Typeflag == tar.TypeDir {
				hdr.Name += "/"
			}
			if hdr.Typeflag == tar.TypeLink {
				hdr.Linkname = cleanName(hdr.Linkname)
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("imagebuild: %s: %w", name, err)
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("imagebuild: %s: %w", name, err)
			}
		}
	})
}

// cleanName is a tar name relative to the root, without "./" or a
// trailing slash; "" for the root itself.
func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// writeLayerFile writes a gzip-compressed layer tar at path (through a
// temporary file and a rename) with fill, and returns it as a layer.
func writeLayerFile(p string, fill func(*tar.Writer) error) (v1.Layer, error) {
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".tmp*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())                         // after the rename: a no-op
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed) // go-containerregistry's own level for layers
	if err != nil {
		f.Close()
		return nil, err
	}
	tw := tar.NewWriter(zw)
	err = fill(tw)
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		return nil, err
	}
	return ReadLayer(p)
}

// ReadLayer returns the layer tar at path (gzip-compressed or not) as a
// layer, hashing it (digest and diff ID).
func ReadLayer(path string) (v1.Layer, error) {
	l, err := tarball.LayerFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: layer %s: %w", path, err)
	}
	return l, nil
}
