package backendtest

import (
	"context"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// Open opens the dataset at url (a source URL, as `cachefs mount` takes it)
// with the credentials of the environment and closes it in t.Cleanup; the
// test fails if either step does. For tests that check what a mount, a
// prefetch or `cachefs index` made of a dataset.
func Open(t testing.TB, url string) backend.Backend {
	t.Helper()
	src, err := source.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := backend.Open(context.Background(), src, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
