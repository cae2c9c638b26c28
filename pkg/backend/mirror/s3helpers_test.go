package mirror_test

import (
	"net/http"

	"github.com/epochfs/epochfs/internal/backendtest"
)

// s3Error answers req with an S3 error of status and code (as s3_test.go's
// fault of that name).
func s3Error(status int, code string) func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
	return func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
		return backendtest.S3ErrorResponse(req, status, code), nil
	}
}
