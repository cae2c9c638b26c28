// Package ociimage writes container images as Docker-archive tars (the
// format of `docker save`, which `ctr images import` and `docker load`
// read) from directories, files and root-filesystem tars, without a daemon
// or a registry. `make images` (internal/cmd/mkimage) and the test cluster
// (internal/testenv) use it.
//
// It is written on archive/tar by hand: go.mod has no image library (one
// would be go-containerregistry), and the format needs little: a config
// JSON, one uncompressed tar per layer, a manifest.json naming them.
// Layers are reproducible: entries sorted by name, owned by root (layers
// from a rootfs tar keep their owners), every time set to ModTime.
//
// It knows nothing about what goes into the images (that is mkimage's and
// the tests' business).
package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// ModTime is the modification time of every entry of a layer written from
// Entries (layers from a rootfs tar keep the tar's times).
var ModTime = time.Unix(0, 0).UTC()

// DefaultPath is the PATH of an image whose Config sets no Env.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is the part of an OCI/Docker image config the images set.
type Config struct {
	User       string            `json:"User,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// A Layer is an uncompressed layer tar on disk.
type Layer struct {
	// Path of the layer tar.
	Path string
	// DiffID is "sha256:<hex>" of the tar (the config's rootfs.diff_ids).
	DiffID string
	// Size in bytes.
	Size int64
}

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
			return fmt.Errorf("ociimage: %s: not a file, directory or symlink", p)
		}
		entries = append(entries, e)
		return nil
	})
	return entries, err
}

// WriteLayer writes entries, sorted by name, as a layer tar at path.
func WriteLayer(path string, entries []Entry) (Layer, error) {
	sorted := append([]Entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	return writeLayerFile(path, func(tw *tar.Writer) error {
		for _, e := range sorted {
			if err := writeEntry(tw, e); err != nil {
				return fmt.Errorf("ociimage: %s: %w", e.Name, err)
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
// path: names without "./", owners, modes, times and extended attributes
// kept, and every entry for which drop returns true left out (drop may be
// nil; it sees the cleaned name, directories without a trailing slash).
// Device nodes and FIFOs are always left out: the runtime makes /dev.
func RootfsLayer(path string, r io.Reader, drop func(name string) bool) (Layer, error) {
	return writeLayerFile(path, func(tw *tar.Writer) error {
		tr := tar.NewReader(r)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("ociimage: rootfs tar: %w", err)
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
				return fmt.Errorf("ociimage: %s: %w", name, err)
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("ociimage: %s: %w", name, err)
			}
		}
	})
}

// cleanName is a tar name relative to the root, without "./" or a
// trailing slash; "" for the root itself.
func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// writeLayerFile writes a layer tar at path (through a temporary file and
// a rename) with fill, hashing it on the way.
func writeLayerFile(p string, fill func(*tar.Writer) error) (Layer, error) {
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".tmp*")
	if err != nil {
		return Layer{}, err
	}
	defer os.Remove(f.Name()) // after the rename: a no-op
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	err = fill(tw)
	if err == nil {
		err = tw.Close()
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
		return Layer{}, err
	}
	return Layer{Path: p, DiffID: digest(h), Size: cw.n}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func digest(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// ReadLayer describes an existing layer tar (hashing it).
func ReadLayer(path string) (Layer, error) {
	f, err := os.Open(path)
	if err != nil {
		return Layer{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Layer{}, err
	}
	return Layer{Path: path, DiffID: digest(h), Size: n}, nil
}

// Write writes an image of layers (bottom first) and cfg, tagged ref
// ("NAME:TAG"; containerd stores a name without a host as
// docker.io/NAME:TAG), as a Docker-archive tar to w.
func Write(w io.Writer, ref string, cfg Config, layers []Layer) error {
	if i := strings.LastIndex(ref, ":"); i < 0 || strings.Contains(ref[i:], "/") {
		return fmt.Errorf("ociimage: image ref %q: want NAME:TAG", ref)
	}
	if len(layers) == 0 {
		return errors.New("ociimage: no layers")
	}
	if cfg.Env == nil {
		cfg.Env = []string{DefaultPath}
	}
	diffIDs := make([]string, len(layers))
	names := make([]string, len(layers))
	for i, l := range layers {
		diffIDs[i] = l.DiffID
		names[i] = strings.TrimPrefix(l.DiffID, "sha256:") + "/layer.tar"
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       cfg,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{ref}, "Layers": names,
	}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	file := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: ModTime}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("ociimage: %s: %d of %d bytes", name, n, size)
		}
		return err
	}
	if err := file(configName, int64(len(config)), strings.NewReader(string(config))); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, l := range layers {
		if seen[names[i]] { // the same layer twice: one copy
			continue
		}
		seen[names[i]] = true
		f, err := os.Open(l.Path)
		if err != nil {
			return err
		}
		err = file(names[i], l.Size, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("ociimage: layer %s: %w", l.Path, err)
		}
	}
	if err := file("manifest.json", int64(len(manifest)), strings.NewReader(string(manifest))); err != nil {
		return err
	}
	return tw.Close()
}

// WriteFile writes the image to path (through a temporary file and a
// rename).
func WriteFile(path, ref string, cfg Config, layers []Layer) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = Write(f, ref, cfg, layers)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// WriteDirImage writes a one-layer image of the tree under root to w (the
// layer goes through a temporary file in os.TempDir).
func WriteDirImage(w io.Writer, root, ref string, cfg Config) error {
	entries, err := DirEntries(root, "")
	if err != nil {
		return fmt.Errorf("ociimage: layer from %s: %w", root, err)
	}
	tmp, err := os.MkdirTemp("", "ociimage")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	layer, err := WriteLayer(filepath.Join(tmp, "layer.tar"), entries)
	if err != nil {
		return err
	}
	return Write(w, ref, cfg, []Layer{layer})
}
