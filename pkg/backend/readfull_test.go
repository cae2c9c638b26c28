package backend_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/pkg/backend"
)

func TestReadFull(t *testing.T) {
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"f": []byte("0123456789")})
	b := backendtest.OpenOptions(t, dir, backend.Options{})
	ctx := context.Background()
	tests := []struct {
		name string
		n    int
		off  int64
		want error // nil: p holds the bytes at off
	}{
		{"whole file", 10, 0, nil},
		{"to the end", 4, 6, nil},
		{"inside", 3, 2, nil},
		{"past the end", 11, 0, io.ErrUnexpectedEOF},
		{"at the end", 1, 10, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := make([]byte, tt.n)
			err := backend.ReadFull(ctx, b, "f", "", p, tt.off)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("ReadFull: %v, want %v", err, tt.want)
			}
			if err == nil && !bytes.Equal(p, []byte("0123456789")[tt.off:tt.off+int64(tt.n)]) {
				t.Fatalf("ReadFull read %q", p)
			}
		})
	}
	if err := backend.ReadFull(ctx, b, "missing", "", make([]byte, 1), 0); !errors.Is(err, backend.ErrNotExist) {
		t.Fatalf("ReadFull of a missing file: %v, want ErrNotExist", err)
	}
}
