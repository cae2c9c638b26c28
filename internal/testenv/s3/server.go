package s3

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/epochfs/epochfs/internal/datagen"
)

// Server is an S3 server the tests reach on 127.0.0.1 (MinIO, Ceph RGW),
// with a client holding its credentials. Exported fields are read-only.
type Server struct {
	// Endpoint is "http://127.0.0.1:PORT".
	Endpoint string
	// Host is "127.0.0.1:PORT".
	Host string
	// AccessKey and SecretKey are the credentials of the tests' user (the
	// random root credentials of a MinIO).
	AccessKey string
	SecretKey string

	client *minio.Client
}

// NewServer returns the Server at endpoint ("http://HOST:PORT") for the
// user with these keys, with its client.
func NewServer(endpoint, accessKey, secretKey string) (*Server, error) {
	s := &Server{Endpoint: endpoint, AccessKey: accessKey, SecretKey: secretKey}
	s.Host = strings.TrimPrefix(endpoint, "http://")
	if err := s.connect(); err != nil {
		return nil, err
	}
	return s, nil
}

// connect sets s.client from the other fields.
func (s *Server) connect() error {
	client, err := minio.New(s.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1",
	})
	if err != nil {
		return fmt.Errorf("s3: client of %s: %w", s.Host, err)
	}
	s.client = client
	return nil
}

// Client returns a minio-go client with the test user's credentials, for
// test setup beyond MakeBucket and Put.
func (s *Server) Client() *minio.Client { return s.client }

// MakeBucket creates a bucket or fails the test.
func (s *Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("s3: make bucket %q: %v", name, err)
	}
}

var bucketSeq atomic.Int64

// NewBucket creates a uniquely named bucket or fails the test, and returns
// its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	// The pid keeps names apart on a Ceph cluster reused across runs.
	name := fmt.Sprintf("epochfs-test-%d-%d", os.Getpid(), bucketSeq.Add(1))
	s.MakeBucket(t, name)
	return name
}

// URL is the source URL of s3://bucket/prefix on s (prefix may be empty),
// as `cachefs mount` takes it.
func (s *Server) URL(bucket, prefix string) string {
	u := "s3://" + bucket
	if prefix != "" {
		u += "/" + prefix
	}
	return u + "?endpoint=" + url.QueryEscape(s.Endpoint) + "&region=us-east-1"
}

// PutFiles writes generated dataset files as objects prefix+path (prefix
// ends in "/" or is empty) or fails the test.
func (s *Server) PutFiles(t testing.TB, bucket, prefix string, files []datagen.File) {
	t.Helper()
	for _, f := range files {
		s.Put(t, bucket, prefix+f.Path, datagen.Content(f))
	}
}

// Put writes an object or fails the test.
func (s *Server) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Ceph RGW rejects the x-amz-content-sha256 that minio-go sends with an
	// empty body; an empty object goes up unsigned (UNSIGNED-PAYLOAD).
	if _, err := s.client.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: len(data) == 0}); err != nil {
		t.Fatalf("s3: put %s/%q: %v", bucket, key, err)
	}
}
