package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// writeJSON writes v to path atomically (temp file in the same directory,
// fsync, rename), mode 0600.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("csi: state: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with data, mode 0600, through a temp file
// in path's directory (so that the rename never crosses file systems).
func writeFileAtomic(path string, data []byte) error {
	return renameio.WriteFile(path, data, 0o600, renameio.WithTempDir(filepath.Dir(path)))
}

// readJSON reads path into v; a missing file is os.ErrNotExist.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("csi: state %s: %w", path, err)
	}
	return nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
