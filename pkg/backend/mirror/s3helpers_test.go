package mirror_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

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
