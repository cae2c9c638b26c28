package imagebuild

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultPath is the PATH of an image whose Config sets no Env.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image returns the image of layers (bottom first) with cfg as its
// container config (Env DefaultPath when cfg sets none), for linux on this
// machine's architecture, with no creation time (reproducible).
func Image(cfg v1.Config, layers ...v1.Layer) (v1.Image, error) {
	if len(layers) == 0 {
		return nil, fmt.Errorf("imagebuild: no layers")
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	cf = cf.DeepCopy()
	if cfg.Env == nil {
		cfg.Env = []string{DefaultPath}
	}
	cf.Architecture, cf.OS, cf.Config = runtime.GOARCH, "linux", cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	return img, nil
}

// ParseRef parses an image reference "NAME:TAG" without a registry host
// (containerd stores it as docker.io/NAME:TAG), as the archives name their
// images.
func ParseRef(ref string) (name.Tag, error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return name.Tag{}, fmt.Errorf("imagebuild: image ref %q: want NAME:TAG", ref)
	}
	if first, _, ok := strings.Cut(ref, "/"); ok && strings.ContainsAny(first, ".:") {
		return name.Tag{}, fmt.Errorf("imagebuild: image ref %q: want NAME:TAG without a registry host", ref)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, fmt.Errorf("imagebuild: image ref %q: %w", ref, err)
	}
	return tag, nil
}

// WriteFile writes img tagged ref ("NAME:TAG", ParseRef) as a
// Docker-archive tar at path (through a temporary file and a rename).
func WriteFile(path, ref string, img v1.Image) error {
	tag, err := ParseRef(ref)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = tarball.Write(tag, img, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		return fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// WriteLayersFile writes the image of layers and cfg (Image) tagged ref
// as a Docker-archive tar at path (WriteFile).
func WriteLayersFile(path, ref string, cfg v1.Config, layers ...v1.Layer) error {
	img, err := Image(cfg, layers...)
	if err != nil {
		return err
	}
	return WriteFile(path, ref, img)
}

// WriteEntriesImage writes a one-layer image of entries, tagged ref, with
// cfg as a Docker-archive tar at path (the layer goes through path.layer,
// removed after).
func WriteEntriesImage(path, ref string, cfg v1.Config, entries []Entry) error {
	layer, err := WriteLayer(path+".layer", entries)
	if err != nil {
		return err
	}
	defer os.Remove(path + ".layer")
	return WriteLayersFile(path, ref, cfg, layer)
}

// ArchiveRef returns the one image ref ("NAME:TAG") a Docker-archive tar
// (WriteFile) holds, from its manifest.json.
func ArchiveRef(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("imagebuild: %s: no manifest.json: %w", path, err)
		}
		if filepath.Clean(h.Name) != "manifest.json" {
			continue
		}
		var m tarball.Manifest
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil || len(m) != 1 || len(m[0].RepoTags) != 1 {
			return "", fmt.Errorf("imagebuild: %s: manifest.json: want one image with one tag (%v)", path, err)
		}
		return m[0].RepoTags[0], nil
	}
}
