package testenv

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ImageConfig is the part of an OCI/Docker image config that WriteImageTar
// sets.
type ImageConfig struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

// WriteImageTar writes a one-layer container image in the Docker archive
// format (what `docker save` writes and `ctr images import` reads) to w:
// the layer holds the tree under root (owned by root, modes and symlinks
// kept), tagged ref ("NAME:TAG"; containerd stores a name without a host
// as docker.io/NAME:TAG). No registry is involved.
func WriteImageTar(w io.Writer, root, ref string, cfg ImageConfig) error {
	if !strings.Contains(ref, ":") {
		return fmt.Errorf("image ref %q: want NAME:TAG", ref)
	}
	var layer bytes.Buffer
	if err := writeLayer(&layer, root); err != nil {
		return fmt.Errorf("layer from %s: %w", root, err)
	}
	diffID := sha256.Sum256(layer.Bytes())
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       cfg,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{ref}, "Layers": []string{"layer.tar"},
	}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {"layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeLayer writes the tree under root as an uncompressed layer tar.
func writeLayer(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// BusyboxImage writes a Docker-archive tar of a tiny image holding only
// Debian's static busybox as /bin/busybox, with /bin/sh and the other
// applets linked to it, tagged ref ("NAME:TAG"), into tarPath. Its default
// command is /bin/sh.
func BusyboxImage(tarPath, ref string) error {
	busybox := "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("busybox (Debian's busybox-static, scripts/cluster-deps.sh): %w", err)
	}
	root, err := os.MkdirTemp(filepath.Dir(tarPath), "busybox-root")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	for _, d := range []string{"bin", "etc", "tmp", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "echo", "cat", "ls", "sleep", "mount", "hostname", "env", "wc", "head", "sha256sum", "dd", "find"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			return err
		}
	}
	f, err := os.Create(tarPath)
	if err != nil {
		return err
	}
	if err := WriteImageTar(f, root, ref, ImageConfig{Cmd: []string{"/bin/sh"}}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
