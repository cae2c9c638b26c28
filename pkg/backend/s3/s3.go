package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// s3Backend serves a bucket prefix of an S3-compatible server.
//
// All fields are immutable after Open except the atomic counters, so the
// backend is safe for concurrent use without a lock.
type s3Backend struct {
	core   *minio.Core
	bucket string
	prefix string // "" or "dir/sub/" (always a trailing slash)
	id     string
	log    *slog.Logger
	retry  *backend.Retrier
	// transport is the base HTTP transport (for Close).
	transport http.RoundTripper

	skipped atomic.Int64
}

var (
	_ backend.Backend      = (*s3Backend)(nil)
	_ backend.RetryCounter = (*s3Backend)(nil)
	_ backend.SkipCounter  = (*s3Backend)(nil)
)

// errShortBody: a response body ended before the requested range did.
var errShortBody = errors.New("response body shorter than the requested range")

// Open returns the Backend of the bucket prefix src names. Unless
// opts.Lazy, it probes the prefix with one one-key listing, so that a
// missing bucket or bad credentials fail here.
func Open(ctx context.Context, src source.Source, opts backend.Options) (backend.Backend, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	host, secure := "s3.amazonaws.com", true
	if src.Endpoint != "" {
		u, err := url.Parse(src.Endpoint)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("s3: open %s: %w: bad endpoint", src, source.ErrInvalidURL)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	base, err := baseTransport(opts, secure)
	if err != nil {
		return nil, fmt.Errorf("s3: open %s: transport: %w", src, err)
	}
	lookup := minio.BucketLookupAuto
	switch {
	case src.PathStyle:
		lookup = minio.BucketLookupPath
	case src.Endpoint != "":
		lookup = minio.BucketLookupDNS
	}
	// minio-go's own retries are off (MaxRetries 1); note that it still
	// sleeps up to minio.DefaultRetryUnit, ctx-aware, after a transient
	// failure before returning it to us.
	core, err := minio.NewCore(host, &minio.Options{
		Creds:        chainCredentials(opts.Credentials),
		Secure:       secure,
		Transport:    &listPageTransport{base: &timeoutTransport{base: base, d: opts.RequestTimeout}},
		Region:       src.Region,
		BucketLookup: lookup,
		MaxRetries:   1, // retries are ours: bounded, counted, ctx-aware
	})
	if err != nil {
		return nil, fmt.Errorf("s3: open %s: %w", src, err)
	}
	prefix := ""
	if src.Prefix != "" {
		prefix = src.Prefix + "/"
	}
	b := &s3Backend{
		core:   core,
		bucket: src.Bucket,
		prefix: prefix,
		id:     "s3://" + host + "/" + src.Bucket + "/" + prefix,
		log:    opts.Logger.With(slog.String("backend", "s3"), slog.String("bucket", src.Bucket)),
		retry:  backend.NewRetrier(opts.Retry, opts.Logger),

		transport: base,
	}
	// Probe: one key of the dataset, so that a missing bucket or bad
	// credentials fail now, with a clear message, not at the first read.
	if opts.Lazy {
		return b, nil
	}
	if _, err := b.firstKey(ctx, b.prefix); err != nil {
		return nil, b.mapErr("open", "", err)
	}
	return b, nil
}

// baseTransport is opts.Transport, else minio-go's transport dialing
// through opts.Egress when set: every connection, a redirect's included, is
// checked on the IP it goes to (package egress).
func baseTransport(opts backend.Options, secure bool) (http.RoundTripper, error) {
	if opts.Transport != nil {
		return opts.Transport, nil
	}
	t, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	if eg := opts.Egress; eg != nil {
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return eg.DialFrom(ctx, network, addr, nil)
		}
	}
	return t, nil
}

// chainCredentials are c when set, else the environment, the shared
// credentials file and then the instance/pod IAM role.
func chainCredentials(c backend.Credentials) *credentials.Credentials {
	if c.AccessKey != "" {
		return credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken)
	}
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
}

func (b *s3Backend) ID() string { return b.id }

func (b *s3Backend) Close() error {
	// minio-go holds nothing but idle connections.
	if ci, ok := b.transport.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
	return nil
}

// Retries implements RetryCounter.
func (b *s3Backend) Retries() int64 { return b.retry.Retries() }

// Skipped implements SkipCounter.
func (b *s3Backend) Skipped() int64 { return b.skipped.Load() }

// key returns the object key of a clean dataset path.
func (b *s3Backend) key(p string) string { return b.prefix + p }

// dirPrefix returns the key prefix of the directory at a clean path.
func (b *s3Backend) dirPrefix(p string) string {
	if p == "" {
		return b.prefix
	}
	return b.prefix + p + "/"
}

func (b *s3Backend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return backend.Entry{}, err
	}
	if p == "" {
		return backend.Entry{IsDir: true}, nil
	}
	e, err := b.statObject(ctx, p)
	if err == nil {
		return e, nil
	}
	if !isNotFound(err) {
		return backend.Entry{}, b.mapErr("stat", p, err)
	}
	isDir, err := b.isDir(ctx, p)
	if err != nil {
		return backend.Entry{}, b.mapErr("stat", p, err)
	}
	if !isDir {
		return backend.Entry{}, fmt.Errorf("s3: stat %q: %w", p, backend.ErrNotExist)
	}
	return backend.Entry{Name: path.Base(p), IsDir: true}, nil
}

// statObject HEADs the object at p; errors are returned unwrapped.
func (b *s3Backend) statObject(ctx context.Context, p string) (backend.Entry, error) {
	var info minio.ObjectInfo
	_, err := b.retry.Do(ctx, "stat", b.retryable, func(ctx context.Context) error {
		var err error
		info, err = b.core.StatObject(ctx, b.bucket, b.key(p), minio.StatObjectOptions{})
		return err
	})
	if err != nil {
		return backend.Entry{}, err
	}
	return backend.Entry{
		Name:    path.Base(p),
		Size:    info.Size,
		ModTime: info.LastModified,
		Version: trimETag(info.ETag),
	}, nil
}

// isDir reports whether any key lies under the directory prefix of p.
func (b *s3Backend) isDir(ctx context.Context, p string) (bool, error) {
	k, err := b.firstKey(ctx, b.dirPrefix(p))
	return k != "", err
}

// firstKey returns the first key under prefix ("" if none); errors are
// returned unwrapped.
func (b *s3Backend) firstKey(ctx context.Context, prefix string) (string, error) {
	var key string
	g := backend.NewProbeGuard(prefix)
	ctx = context.WithValue(ctx, listGuardKey{}, g) // pages counted by listPageTransport
	_, err := b.retry.Do(ctx, "probe", b.retryable, func(ctx context.Context) error {
		for obj := range b.core.Client.ListObjectsIter(ctx, b.bucket, minio.ListObjectsOptions{
			Prefix: prefix, Recursive: true, MaxKeys: 1,
		}) {
			if obj.Err != nil {
				return obj.Err
			}
			key = obj.Key
			return nil
		}
		return ctx.Err() // minio-go ends a canceled listing silently
	})
	return key, err
}

func (b *s3Backend) List(ctx context.Context, p string) ([]backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return nil, err
	}
	prefix := b.dirPrefix(p)
	byName := make(map[string]backend.Entry)
	seen := false    // any key at all under prefix (even a marker or a bad name)
	startAfter := "" // resume point after a failed page
	// The caps (listlimit.go): entries and memory as items arrive, pages
	// by listPageTransport, which finds g in the requests' ctx.
	g := backend.NewListGuard(ctx, p)
	defer g.Release()
	lctx := context.WithValue(ctx, listGuardKey{}, g)
	_, err = b.retry.Do(lctx, "list", b.retryable, func(ctx context.Context) error {
		for obj := range b.core.Client.ListObjectsIter(ctx, b.bucket, minio.ListObjectsOptions{
			Prefix:     prefix,
			Recursive:  false, // ListObjectsV2 with Delimiter "/", paginated by minio-go
			StartAfter: startAfter,
		}) {
			if obj.Err != nil {
				return obj.Err
			}
			seen = true
			startAfter = max(startAfter, obj.Key)
			if e, added := b.addChild(byName, prefix, obj); added {
				if err := g.Entry(e.Name, e.Version); err != nil {
					return err // breaking out stops minio-go's pagination
				}
			}
		}
		return ctx.Err() // minio-go ends a canceled listing silently
	})
	if err != nil {
		return nil, b.mapErr("list", p, err)
	}
	if !seen && p != "" {
		// Nothing under the prefix: either a file or nothing at all.
		if _, err := b.statObject(ctx, p); err == nil {
			return nil, fmt.Errorf("s3: list %q: %w", p, backend.ErrNotDir)
		} else if !isNotFound(err) {
			return nil, b.mapErr("list", p, err)
		}
		return nil, fmt.Errorf("s3: list %q: %w", p, backend.ErrNotExist)
	}
	out := make([]backend.Entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y backend.Entry) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// addChild turns one listing item (an object or a common prefix) into a
// child entry of the directory at prefix, skipping invalid names; added
// reports a name not held before.
func (b *s3Backend) addChild(byName map[string]backend.Entry, prefix string, obj minio.ObjectInfo) (e backend.Entry, added bool) {
	rel := strings.TrimPrefix(obj.Key, prefix)
	if rel == "" {
		return e, false // a "directory marker" object for the directory itself
	}
	e = backend.Entry{Name: rel}
	if strings.HasSuffix(rel, "/") {
		e = backend.Entry{Name: strings.TrimSuffix(rel, "/"), IsDir: true}
	} else {
		e.Size, e.ModTime, e.Version = obj.Size, obj.LastModified, trimETag(obj.ETag)
	}
	if !source.ValidName(e.Name) {
		b.skip(obj.Key, "name would escape the mount or is not a valid file name")
		return e, false
	}
	if prev, dup := byName[e.Name]; dup {
		if prev.IsDir == e.IsDir {
			return e, false // the same item again after a resumed page
		}
		b.skip(obj.Key, "a file and a directory share this name; keeping the file")
		if prev.IsDir {
			byName[e.Name] = e
		}
		return e, false
	}
	byName[e.Name] = e
	return e, true
}

func (b *s3Backend) skip(key, why string) {
	b.skipped.Add(1)
	b.log.Warn("skipping object key", slog.String("key", strconv.Quote(key)), slog.String("reason", why))
}

func (b *s3Backend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return 0, err
	}
	if p == "" {
		return 0, fmt.Errorf("s3: read %q: %w", p, backend.ErrIsDir)
	}
	if off < 0 {
		return 0, fmt.Errorf("s3: read %q: negative offset %d", p, off)
	}
	if len(buf) == 0 {
		return 0, nil
	}
	var n int
	var eof bool
	_, err = b.retry.Do(ctx, "read", b.retryable, func(ctx context.Context) error {
		var err error
		n, eof, err = b.readOnce(ctx, p, version, buf, off)
		return err
	})
	if err != nil {
		resp := minio.ToErrorResponse(err)
		switch {
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable || resp.Code == "InvalidRange":
			// off is at or past the end of the object.
			if version != "" {
				e, serr := b.statObject(ctx, p)
				if serr != nil {
					return 0, b.mapErr("read", p, serr)
				}
				if e.Version != version {
					return 0, fmt.Errorf("s3: read %q: %w (version %q, now %q)", p, backend.ErrChanged, version, e.Version)
				}
			}
			return 0, io.EOF
		case isNotFound(err):
			isDir, derr := b.isDir(ctx, p)
			if derr == nil && isDir {
				return 0, fmt.Errorf("s3: read %q: %w", p, backend.ErrIsDir)
			}
		}
		return 0, b.mapErr("read", p, err)
	}
	if eof {
		return n, io.EOF
	}
	return n, nil
}

// readOnce makes one ranged GET and reads the whole range into buf. It
// returns errShortBody if the body ends early, and eof when the object
// ends before buf is full.
func (b *s3Backend) readOnce(ctx context.Context, p, version string, buf []byte, off int64) (int, bool, error) {
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(buf))-1); err != nil {
		return 0, false, err
	}
	if version != "" {
		if err := opts.SetMatchETag(version); err != nil {
			return 0, false, err
		}
	}
	body, info, hdr, err := b.core.GetObject(ctx, b.bucket, b.key(p), opts)
	if err != nil {
		return 0, false, err
	}
	defer body.Close()
	if version != "" && info.ETag != "" && trimETag(info.ETag) != version {
		// The server ignored If-Match; never hand out other bytes.
		return 0, false, minio.ErrorResponse{StatusCode: http.StatusPreconditionFailed, Code: "PreconditionFailed", Message: "ETag mismatch"}
	}
	start, total := off, info.Size
	if cr := hdr.Get("Content-Range"); cr != "" {
		var end int64
		start, end, total, err = parseContentRange(cr)
		if err != nil {
			return 0, false, err
		}
		if start != off || end-start+1 != info.Size && info.Size >= 0 {
			return 0, false, fmt.Errorf("%w: Content-Range %q for a body of %d bytes at offset %d", errShortBody, cr, info.Size, off)
		}
	} else if off > 0 {
		// 200 OK: the server sent the whole object; skip to off.
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			return 0, false, shortBody(err)
		}
	}
	want := int64(len(buf))
	if rest := total - off; rest < want {
		want = max(rest, 0)
	}
	n, err := io.ReadFull(body, buf[:want])
	if err != nil {
		return n, false, shortBody(err)
	}
	return n, want < int64(len(buf)), nil
}

func shortBody(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errShortBody
	}
	return err
}

// parseContentRange parses "bytes START-END/TOTAL".
func parseContentRange(s string) (start, end, total int64, err error) {
	bad := fmt.Errorf("bad Content-Range %q", s)
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	a, z, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, bad
	}
	if start, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	if end, err = strconv.ParseInt(z, 10, 64); err != nil || end < start {
		return 0, 0, 0, bad
	}
	if total, err = strconv.ParseInt(tot, 10, 64); err != nil || total <= end {
		return 0, 0, 0, bad
	}
	return start, end, total, nil
}

// retryable classifies an unwrapped error of one attempt: 5xx, 408, 429 and
// throttling codes, timeouts, connection failures and short bodies are
// transient; any other 4xx or API error is permanent.
func (b *s3Backend) retryable(err error) bool {
	if errors.Is(err, backend.ErrListTooLarge) {
		return false // a cap (listlimit.go): listing again would pass it again
	}
	if backend.RefusedEgress(err) {
		return false // a refused destination stays refused
	}
	if errors.Is(err, errShortBody) {
		return true
	}
	if resp := minio.ToErrorResponse(err); resp.StatusCode != 0 || resp.Code != "" {
		switch resp.StatusCode {
		case http.StatusRequestTimeout, http.StatusTooManyRequests:
			return true
		}
		if resp.StatusCode >= 500 {
			return true
		}
		switch resp.Code {
		case "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "ThrottlingException":
			return true
		}
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false // the caller's ctx (checked by the Retrier) or ours: stop
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true // the per-attempt timeout (the Retrier checks the caller's ctx)
	}
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr) {
		return false
	}
	var urlErr *url.Error
	var netErr net.Error
	if errors.As(err, &urlErr) || errors.As(err, &netErr) {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF)
}

// isNotFound reports a missing key (HEAD and GET 404s).
func isNotFound(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket")
}

// mapErr turns an unwrapped minio-go error into a backend error: it
// classifies first (minio.ToErrorResponse is a plain type switch) and only
// then wraps.
func (b *s3Backend) mapErr(op, p string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("s3: %s %q: %w", op, p, err)
	}
	var lim *backend.ListLimitError
	switch {
	case errors.As(err, &lim): // without minio-go's and net/http's wrapping (the request URL)
		return fmt.Errorf("s3: %s: %w", op, lim)
	case errors.Is(err, errListPageTooLarge):
		return fmt.Errorf("s3: %s %q: %w", op, p, errListPageTooLarge)
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchBucket":
		return fmt.Errorf("s3: %s %q: %w: bucket %q does not exist", op, p, backend.ErrNotExist, b.bucket)
	case isNotFound(err):
		return fmt.Errorf("s3: %s %q: %w", op, p, backend.ErrNotExist)
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed":
		return fmt.Errorf("s3: %s %q: %w", op, p, backend.ErrChanged)
	case resp.StatusCode == http.StatusForbidden || resp.Code == "AccessDenied" ||
		resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch":
		return fmt.Errorf("s3: %s %q: %w: %s (%s): check the credentials (backend.Options.Credentials, "+
			"AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the shared credentials file, IAM role) "+
			"and the bucket policy", op, p, backend.ErrPermission, resp.Code, strings.TrimSuffix(resp.Message, "."))
	case errors.Is(err, errShortBody):
		return fmt.Errorf("s3: %s %q: %w", op, p, io.ErrUnexpectedEOF)
	case backend.RefusedEgress(err):
		return fmt.Errorf("s3: %s %q: %w: %w", op, p, backend.ErrPermission, err)
	case b.retryable(err) && resp.Code != "":
		return fmt.Errorf("s3: %s %q: %w: %s (%s, HTTP %d): %w", op, p, backend.ErrUnavailable, resp.Code, strings.TrimSuffix(resp.Message, "."), resp.StatusCode, err)
	case b.retryable(err):
		return fmt.Errorf("s3: %s %q: %w: %w", op, p, backend.ErrUnavailable, err)
	case resp.Code != "":
		return fmt.Errorf("s3: %s %q: %s (%s, HTTP %d): %w", op, p, resp.Code, strings.TrimSuffix(resp.Message, "."), resp.StatusCode, err)
	}
	return fmt.Errorf("s3: %s %q: %w", op, p, err)
}

// trimETag strips the quotes (and a weak prefix) around an ETag.
func trimETag(etag string) string {
	etag = strings.TrimPrefix(etag, "W/")
	return strings.Trim(etag, `"`)
}
