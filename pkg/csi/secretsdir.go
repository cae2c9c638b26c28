package csi

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The node keeps each dataset's credentials in <state>/node/secrets/<key>.env
// (0600) while the dataset is staged, so that a restarted driver can restart
// or repair its mount process (which gets them through a pipe, never a
// file). That directory is a tmpfs the driver mounts at start: credentials
// are never written to a disk. A driver restart re-uses the tmpfs (in
// Kubernetes it reaches the host through the state dir's Bidirectional
// propagation, so a driver container restart keeps it too); a node reboot
// loses it, and the mounts with it: a dataset whose credentials are gone
// then fails to start (errCredentialsLost) instead of reading with the
// node's identity.
const (
	// secretsTmpfsSize caps the tmpfs: a secrets file is under 4 KiB.
	secretsTmpfsSize = "4m"
	secretsTmpfsOpts = "mode=0700,size=" + secretsTmpfsSize
	secretsTmpfsFlag = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
)

// prepareSecretsDir makes dir a tmpfs (mode 0700, 4 MiB, nosuid, nodev,
// noexec) unless it is one already (a restarted driver re-uses it). Files
// an older driver left on the disk below are moved into the tmpfs and
// removed from the disk. When the tmpfs cannot be mounted (not root, no
// CAP_SYS_ADMIN), it fails, unless allowDisk, which keeps the credentials in
// the 0700 directory on the disk and says so in one warning line.
func prepareSecretsDir(dir string, allowDisk bool, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("csi: secrets dir: %w", err)
	}
	if ok, fstype, err := isMounted(dir); err != nil {
		return err
	} else if ok && fstype == "tmpfs" {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("csi: secrets dir: %w", err)
		}
		log.Info("credentials kept in memory: re-using the tmpfs", "dir", dir)
		return nil
	}
	// The disk directory stays reachable through this descriptor once the
	// tmpfs covers it: what an older driver wrote there is moved up.
	disk, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("csi: secrets dir: %w", err)
	}
	defer disk.Close()
	// mount(2) itself, not mount-utils: that execs mount(8), whose error loses the errno reported below.
	if err := syscall.Mount("tmpfs", dir, "tmpfs", secretsTmpfsFlag, secretsTmpfsOpts); err != nil {
		if allowDisk {
			log.Warn("credentials kept ON DISK: cannot mount a tmpfs on the secrets dir (not root?); allowed by --allow-disk-secrets", "dir", dir, "err", err)
			return nil
		}
		return fmt.Errorf("csi: cannot mount a tmpfs for credentials on %s: %w (the node plugin must run as root; "+
			"--allow-disk-secrets keeps them in a 0700 directory on disk instead)", dir, err)
	}
	moved, err := moveSecretsUp(disk, dir)
	if err != nil {
		return err
	}
	log.Info("credentials kept in memory: mounted a tmpfs", "dir", dir, "size", secretsTmpfsSize, "movedFromDisk", moved)
	return nil
}

// moveSecretsUp moves the secrets files of the disk directory (below the
// tmpfs now mounted at dir) into the tmpfs and removes every file of the
// disk directory. It returns how many it moved.
func moveSecretsUp(disk *os.Root, dir string) (int, error) {
	ents, err := fs.ReadDir(disk.FS(), ".")
	if err != nil {
		return 0, fmt.Errorf("csi: secrets dir on disk: %w", err)
	}
	moved := 0
	for _, e := range ents {
		name := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(name, ".env") && !strings.HasPrefix(name, ".") {
			b, err := disk.ReadFile(name)
			if err != nil {
				return moved, fmt.Errorf("csi: secrets dir on disk: %w", err)
			}
			if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
				return moved, fmt.Errorf("csi: secrets tmpfs: %w", err)
			}
			moved++
		}
		// Anything else is a temp file of an interrupted write.
		if err := disk.RemoveAll(name); err != nil {
			return moved, fmt.Errorf("csi: secrets dir on disk: %w", err)
		}
	}
	return moved, nil
}

// errCredentialsLost: a dataset started with credentials has no secrets
// file any more (the secrets tmpfs was lost, e.g. at a node reboot). It is
// not started with the node's identity instead.
var errCredentialsLost = errors.New("its credentials are gone from the node (the secrets tmpfs was lost, e.g. at a node reboot)")

// markCredentialed records Credentials in the dataset record of every
// secrets file in the secrets dir (records of drivers older than that
// field), so that a dataset whose credentials are lost later is never
// restarted without them. Run before the node state loads.
func markCredentialed(nodeDir string, log *slog.Logger) {
	files, _ := filepath.Glob(filepath.Join(nodeDir, "secrets", "*.env"))
	for _, f := range files {
		key := strings.TrimSuffix(filepath.Base(f), ".env")
		p := filepath.Join(nodeDir, "datasets", key+".json")
		var ds datasetMount
		if err := readJSON(p, &ds); err != nil || ds.Credentials {
			continue
		}
		ds.Credentials = true
		if err := writeJSON(p, &ds); err != nil {
			log.Warn("cannot mark a dataset as using credentials", "key", key, "err", err)
		}
	}
}
