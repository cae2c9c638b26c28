package s3

import (
	"fmt"
	"io"
	"net/http"

	"github.com/epochfs/epochfs/pkg/backend"
)

// maxListPageBytes bounds one S3 listing page's response body: 1,000 keys
// of 1,024 bytes, URL-encoded (up to 3 bytes each), with their metadata
// are under 4 MiB; a server that sends more (ignoring max-keys) is refused
// before the XML decoder holds it. A variable for tests only.
var maxListPageBytes int64 = 8 << 20

// errListPageTooLarge: an S3 listing page over maxListPageBytes.
var errListPageTooLarge = fmt.Errorf("%w: a listing page over 8 MiB", backend.ErrListTooLarge)

type listGuardKey struct{}

// listPageTransport counts the requests of an S3 List against its
// ListGuard (the ctx of minio-go's paginating iterator carries it, so a
// page that yields nothing is counted too) and bounds each page's body.
// Requests without a guard pass through.
type listPageTransport struct {
	base http.RoundTripper
}

func (t *listPageTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g, ok := req.Context().Value(listGuardKey{}).(*backend.ListGuard)
	if !ok {
		return t.base.RoundTrip(req)
	}
	if err := g.Page(); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: maxListPageBytes}
	return resp, nil
}

// limitedBody fails a read past left bytes with errListPageTooLarge.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more tells a body of exactly left bytes from a longer one
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		return int(b.left), errListPageTooLarge
	}
	b.left -= int64(n)
	return n, err
}
