// Package s3 is the backend of a bucket prefix on any S3-compatible server,
// through minio-go: listings by delimiter, ranged GETs pinned to the listed
// ETag, retries of transient failures, a timeout per request and a cap on
// each listing page's body. It also stores small objects (Put) for metadata
// kept next to the dataset.
//
// It knows only pkg/backend's contract and minio-go: nothing of caching,
// FUSE, CSI or the other backends. Credentials reach it only through
// backend.Options.
package s3
