package s3_test

import (
	"context"
	"errors"
	"testing"

	"github.com/epochfs/epochfs/internal/fakes3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/backend/s3"
	"github.com/epochfs/epochfs/pkg/source"
)

// TestS3ListPageSizeCap: a page body over the cap (8 MiB; 1 MiB here, so
// that the race detector's decoder is quick) from a server ignoring
// max-keys is refused before it is decoded, not retried. Without the cap,
// minio-go decodes the whole page.
func TestS3ListPageSizeCap(t *testing.T) {
	defer s3.SetMaxListPageBytes(1 << 20)()
	s := &fakes3.Server{Bucket: "data", Endless: []string{"big/"}, PageKeys: 2000, KeyLen: 1000, Backstop: 2000}
	s.Start(t)
	src, err := source.Parse(s.Source())
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, backend.Options{Credentials: backend.Credentials{AccessKey: "k", SecretKey: "s"}, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	_, err = b.List(backend.WithListLimits(context.Background(), backend.ListLimits{MaxEntries: 1 << 20}), "big")
	if !errors.Is(err, backend.ErrListTooLarge) {
		t.Fatalf("List(big) = %v, want ErrListTooLarge (a page over the cap)", err)
	}
	if n := s.Pages("big/"); n != 1 {
		t.Errorf("%d requests, want 1 (no retry of a page over the cap)", n)
	}
}
