package backendtest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// S3ErrorResponse is the response of an S3 server refusing req with status
// and the S3 error code (e.g. 503 SlowDown), for tests that inject faults
// between an S3 client and its server.
func S3ErrorResponse(req *http.Request, status int, code string) *http.Response {
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected %s</Message><Resource>%s</Resource><RequestId>1</RequestId></Error>`, code, code, req.URL.Path)
	return &http.Response{
		StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}
}
