package mirror_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
)

// Helpers for tests that use an S3 server too (as in s3_test.go).

var bucketSeq atomic.Int64

// newBucket creates a uniquely named bucket on m.
func newBucket(t *testing.T, m *s3.Server) string {
	t.Helper()
	// The pid keeps names apart on a Ceph cluster reused across runs.
	name := fmt.Sprintf("epochfs-test-%d-%d", os.Getpid(), bucketSeq.Add(1))
	m.MakeBucket(t, name)
	return name
}

func s3URL(m *s3.Server, bucket, prefix string) string {
	u := "s3://" + bucket
	if prefix != "" {
		u += "/" + prefix
	}
	return u + "?endpoint=" + url.QueryEscape(m.Endpoint) + "&region=us-east-1"
}

func creds(m *s3.Server) backend.Credentials {
	return backend.Credentials{AccessKey: m.AccessKey, SecretKey: m.SecretKey}
}

// s3Error answers req with an S3 error of status and code (as s3_test.go's
// fault of that name).
func s3Error(status int, code string) func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
	return func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
		body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected %s</Message><Resource>%s</Resource><RequestId>1</RequestId></Error>`, code, code, req.URL.Path)
		return &http.Response{
			StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/xml"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req,
		}, nil
	}
}
