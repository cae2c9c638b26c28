// Package fakes3 is a tiny S3 server for tests of hostile listings: enough of
// ListObjectsV2, HEAD and GET for minio-go, on 127.0.0.1 only. It serves a
// few ordinary objects, and under chosen prefixes listings that never end:
// every page full of new keys, or empty, always IsTruncated=true with a new
// continuation token. It checks no signature.
//
// A hostile server would list forever; this one stops an endless listing
// after Server.Backstop pages' worth of keys (then IsTruncated=false), so
// that a test run against code without listing caps fails its assertions
// instead of exhausting the machine's memory.
package fakes3

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DefaultBackstop is the default Server.Backstop.
const DefaultBackstop = 1_000_000

// Server is a running fake. Its fields are set before Start and not changed
// after.
type Server struct {
	Bucket string
	// Objects are the ordinary objects, by key.
	Objects map[string][]byte
	// Endless are prefixes ("dir/") whose listings never end, each page
	// PageKeys new keys of KeyLen bytes; EmptyPages are prefixes whose
	// listings never end either, every page empty.
	Endless, EmptyPages []string
	PageKeys, KeyLen    int
	// Backstop: an endless listing ends after this many keys (pages of
	// PageKeys; DefaultBackstop when 0).
	Backstop int

	URL   string // http://127.0.0.1:PORT
	pages sync.Map
	srv   *httptest.Server
}

// Start serves s on 127.0.0.1 until t ends.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.PageKeys == 0 {
		s.PageKeys = 1000
	}
	if s.KeyLen == 0 {
		s.KeyLen = 200
	}
	if s.Backstop == 0 {
		s.Backstop = DefaultBackstop
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve)) // listens on 127.0.0.1
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
}

// Source is the s3:// source URL of the bucket.
func (s *Server) Source() string {
	return "s3://" + s.Bucket + "?endpoint=" + url.QueryEscape(s.URL) + "&region=us-east-1"
}

// Pages returns how many list requests were made with prefix.
func (s *Server) Pages(prefix string) int64 {
	v, ok := s.pages.Load(prefix)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if bucket != s.Bucket {
		http.Error(w, "<Error><Code>NoSuchBucket</Code></Error>", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	switch {
	case key == "" && q.Get("list-type") == "2":
		s.list(w, q)
	case key != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		b, ok := s.Objects[key]
		if !ok {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			if r.Method == http.MethodGet {
				fmt.Fprint(w, `<Error><Code>NoSuchKey</Code><Message>no</Message></Error>`)
			}
			return
		}
		w.Header().Set("ETag", etag(b))
		w.Header().Set("Last-Modified", time.Unix(1e9, 0).UTC().Format(http.TimeFormat))
		http.ServeContent(w, r, "", time.Unix(1e9, 0), strings.NewReader(string(b)))
	default:
		http.Error(w, "<Error><Code>NotImplemented</Code></Error>", http.StatusNotImplemented)
	}
}

func etag(b []byte) string { return fmt.Sprintf(`"%08x%08d"`, len(b), len(b)) }

type listResult struct {
	XMLName               xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string
	Prefix                string
	KeyCount              int
	MaxKeys               int
	Delimiter             string
	IsTruncated           bool
	NextContinuationToken string     `xml:",omitempty"`
	Contents              []content  `xml:"Contents"`
	CommonPrefixes        []comPrefx `xml:"CommonPrefixes"`
}

type content struct {
	Key          string
	LastModified string
	ETag         string
	Size         int64
	StorageClass string
}

type comPrefx struct{ Prefix string }

func (s *Server) list(w http.ResponseWriter, q url.Values) {
	prefix, delim, token := q.Get("prefix"), q.Get("delimiter"), q.Get("continuation-token")
	v, _ := s.pages.LoadOrStore(prefix, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	res := listResult{Name: s.Bucket, Prefix: prefix, MaxKeys: 1000, Delimiter: delim}
	switch {
	case contains(s.Endless, prefix), contains(s.EmptyPages, prefix):
		page, _ := strconv.Atoi(token) // "" is page 0
		if (page+1)*max(s.PageKeys, 1) < s.Backstop {
			res.IsTruncated, res.NextContinuationToken = true, strconv.Itoa(page+1)
		}
		if contains(s.Endless, prefix) {
			for i := range s.PageKeys {
				name := fmt.Sprintf("%012d-", page*s.PageKeys+i)
				name += strings.Repeat("k", max(s.KeyLen-len(name), 0))
				res.Contents = append(res.Contents, content{Key: prefix + name, LastModified: "2026-01-01T00:00:00.000Z",
					ETag: `"0123456789abcdef0123456789abcdef"`, Size: 1, StorageClass: "STANDARD"})
			}
		}
	default:
		s.listObjects(&res, prefix, delim, q.Get("start-after"), q.Get("max-keys"))
	}
	res.KeyCount = len(res.Contents) + len(res.CommonPrefixes)
	w.Header().Set("Content-Type", "application/xml")
	_ = xml.NewEncoder(w).Encode(res)
}

// listObjects lists the ordinary objects, and the endless prefixes as
// common prefixes, in one page.
func (s *Server) listObjects(res *listResult, prefix, delim, startAfter, maxKeys string) {
	keys := make([]string, 0, len(s.Objects))
	for k := range s.Objects {
		keys = append(keys, k)
	}
	for _, p := range append(append([]string{}, s.Endless...), s.EmptyPages...) {
		keys = append(keys, p+"x") // makes the prefix show as a directory
	}
	sort.Strings(keys)
	limit, err := strconv.Atoi(maxKeys)
	if err != nil || limit <= 0 {
		limit = 1000
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) || k <= startAfter {
			continue
		}
		if res.KeyCount = len(res.Contents) + len(res.CommonPrefixes); res.KeyCount >= limit {
			res.IsTruncated, res.NextContinuationToken = true, "more"
			return
		}
		rest := k[len(prefix):]
		if i := strings.Index(rest, delim); delim != "" && i >= 0 {
			cp := prefix + rest[:i+1]
			if !seen[cp] {
				seen[cp] = true
				res.CommonPrefixes = append(res.CommonPrefixes, comPrefx{Prefix: cp})
			}
			continue
		}
		if _, ok := s.Objects[k]; !ok {
			continue
		}
		res.Contents = append(res.Contents, content{Key: k, LastModified: "2026-01-01T00:00:00.000Z",
			ETag: etag(s.Objects[k]), Size: int64(len(s.Objects[k])), StorageClass: "STANDARD"})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
