// Package s3 starts MinIO servers for tests and benchmarks on 127.0.0.1
// and holds the S3 client the tests use to fill a bucket (Server; Ceph's
// RGW is one too, from package ceph). Launch is the error-returning core
// that internal/benchproc uses; StartMinIO is its testing wrapper, which
// stops the server in t.Cleanup and skips (or, under CI=true, fails) a test
// when `make tools` has not installed minio.
//
// It knows nothing of EpochFS's own S3 backend (pkg/backend): it is the
// far side of it.
package s3
