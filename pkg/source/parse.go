package source

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/epochfs/epochfs/pkg/units"
)

// Parse parses a dataset source URL:
//
//	/abs/path  or  file:///abs/path
//	s3://bucket[/prefix][?endpoint=URL&region=NAME&pathStyle=true|false]
//	cephfs://[user@]monhost[:port]/path[?fs=NAME]
//	nfs://host[:port]/export/path[?uid=N&gid=N&mountport=N&conns=N&rsize=SIZE]
//	mirror:URL1,URL2[,...]
//
// nfs: port is the NFS port (default: the portmapper's answer, else 2049);
// uid and gid the AUTH_UNIX identity (default 0); mountport the MOUNT port
// when the server's portmapper (port 111) cannot be asked, e.g.
// nfs://filer:2049/export?mountport=20048; conns the number of connections
// (default 8); rsize the largest READ, a size as units.ParseSize reads it
// (1Mi, 1MiB or 1048576; default 1 MiB; written back in bytes).
//
// A malformed URL returns an error wrapping ErrInvalidURL whose message
// names the wrong part, e.g. `source "s3:///x": bucket is empty`.
// Credentials embedded in the URL are rejected: they come only from the
// environment, credential files or secrets (see Options). The URL quoted in
// an error message has any embedded password redacted.
func Parse(raw string) (Source, error) {
	src, err := parse(raw, false)
	if err != nil {
		return Source{}, fmt.Errorf("source %q: %w", redact(raw), err)
	}
	return src, nil
}

// urlError is a parse failure: it wraps ErrInvalidURL and prints only the
// message naming the wrong part (the caller adds the quoted source).
type urlError struct{ msg string }

func (e *urlError) Error() string { return e.msg }
func (e *urlError) Unwrap() error { return ErrInvalidURL }

func invalid(format string, args ...any) error {
	return &urlError{msg: fmt.Sprintf(format, args...)}
}

func parse(raw string, inMirror bool) (Source, error) {
	if raw == "" {
		return Source{}, invalid("empty source")
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Source{}, invalid("contains a control character")
	}
	if strings.HasPrefix(raw, "/") {
		return parsePosixPath(raw)
	}
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok || scheme == "" {
		return Source{}, invalid("path must be absolute or a URL (file://, s3://, cephfs://, nfs://, mirror:)")
	}
	switch strings.ToLower(scheme) {
	case "mirror":
		if inMirror {
			return Source{}, invalid("a mirror cannot contain another mirror")
		}
		return parseMirror(raw[len(scheme)+1:])
	case "file", "s3", "cephfs", "nfs":
	default:
		return Source{}, invalid("unknown scheme %q (want file, s3, cephfs, nfs or mirror)", scheme)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the raw URL, which may hold a password
		}
		return Source{}, invalid("malformed URL: %v", err)
	}
	if u.Opaque != "" {
		return Source{}, invalid("expected %s://…", u.Scheme)
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return Source{}, invalid("fragment (#…) is not allowed")
	}
	if u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword || u.Scheme != "cephfs" {
			return Source{}, invalid("credentials in the URL are not allowed: pass them through the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a credentials file or a secret")
		}
	}
	switch u.Scheme {
	case "file":
		return parseFileURL(u)
	case "s3":
		return parseS3(u)
	case "cephfs":
		return parseCephFS(u)
	default: // "nfs"
		return parseNFS(u)
	}
}

func parsePosixPath(p string) (Source, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return Source{}, invalid("path contains NUL")
	}
	if !strings.HasPrefix(p, "/") {
		return Source{}, invalid("path must be absolute")
	}
	return Source{Kind: KindPosix, Path: path.Clean(p)}, nil
}

func parseFileURL(u *url.URL) (Source, error) {
	if u.Host != "" && u.Host != "localhost" {
		return Source{}, invalid("file URL host %q: only local paths (file:///abs/path) are supported", u.Host)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return Source{}, invalid("file URL takes no query parameters")
	}
	if u.Path == "" {
		return Source{}, invalid("file URL path is empty")
	}
	return parsePosixPath(u.Path)
}

func parseS3(u *url.URL) (Source, error) {
	src := Source{Kind: KindS3, Bucket: u.Host}
	if src.Bucket == "" {
		return Source{}, invalid("bucket is empty")
	}
	if err := validBucket(src.Bucket); err != nil {
		return Source{}, invalid("bucket %q: %s", src.Bucket, err)
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if !validPrefix(prefix) {
			return Source{}, invalid("prefix %q: not a clean relative path (no empty, \".\" or \"..\" components, no control characters, components up to %d bytes)", prefix, MaxNameLen)
		}
	}
	src.Prefix = prefix
	q, err := parseQuery(u, "endpoint", "region", "pathStyle")
	if err != nil {
		return Source{}, err
	}
	if v, ok := q["endpoint"]; ok {
		ep, err := parseEndpoint(v)
		if err != nil {
			return Source{}, err
		}
		src.Endpoint = ep
	}
	if v, ok := q["region"]; ok {
		if !validRegion(v) {
			return Source{}, invalid("region %q: want lowercase letters, digits and dashes", v)
		}
		src.Region = v
	}
	pathStyle, ok := q["pathStyle"]
	if ok && pathStyle != "true" && pathStyle != "false" {
		return Source{}, invalid("pathStyle %q: want true or false", pathStyle)
	}
	src.PathStyle = src.Endpoint != ""
	if pathStyle != "" {
		src.PathStyle = pathStyle == "true"
	}
	return src, nil
}

// parseQuery returns the query parameters of u, each at most once and all
// in allowed; an unknown parameter is an error naming it.
func parseQuery(u *url.URL, allowed ...string) (map[string]string, error) {
	if u.RawQuery == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, invalid("malformed query: %v", err)
	}
	out := make(map[string]string, len(vals))
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		if len(allowed) == 0 {
			return nil, invalid("unknown query parameter %q (none are allowed)", k)
		}
		if !slices.Contains(allowed, k) {
			return nil, invalid("unknown query parameter %q (allowed: %s)", k, strings.Join(allowed, ", "))
		}
		if len(vals[k]) != 1 {
			return nil, invalid("query parameter %q given %d times", k, len(vals[k]))
		}
		out[k] = vals[k][0]
	}
	return out, nil
}

// parseEndpoint accepts "http(s)://host[:port]" or "host[:port]" (https)
// and returns "scheme://host[:port]".
func parseEndpoint(v string) (string, error) {
	if v == "" {
		return "", invalid("endpoint is empty")
	}
	raw := v
	if !strings.Contains(v, "://") {
		raw = "https://" + v
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", invalid("endpoint: want http(s)://host[:port] or host[:port]")
	}
	if u.User != nil {
		return "", invalid("endpoint: credentials in the URL are not allowed: pass them through the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a credentials file or a secret")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", invalid("endpoint %q: scheme must be http or https", v)
	}
	if u.Opaque != "" || u.Host == "" {
		return "", invalid("endpoint %q: host is empty", v)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", invalid("endpoint %q: must be scheme://host[:port] with no path or query", v)
	}
	if err := validHostPort(u.Host); err != nil {
		return "", invalid("endpoint %q: %s", v, err)
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}

func parseCephFS(u *url.URL) (Source, error) {
	src := Source{Kind: KindCephFS}
	if u.User != nil {
		src.User = u.User.Username()
		if !validIdent(src.User) {
			return Source{}, invalid("user %q: want letters, digits, '.', '_' and '-'", src.User)
		}
	}
	if u.Host == "" {
		return Source{}, invalid("monitor host is empty")
	}
	if err := validHostPort(u.Host); err != nil {
		return Source{}, invalid("monitor host %q: %s", u.Host, err)
	}
	src.Host = strings.ToLower(u.Host)
	p, err := absServerPath(u.Path, "path", true)
	if err != nil {
		return Source{}, err
	}
	src.Path = p
	q, err := parseQuery(u, "fs")
	if err != nil {
		return Source{}, err
	}
	if fs, ok := q["fs"]; ok {
		if !validIdent(fs) {
			return Source{}, invalid("fs %q: want letters, digits, '.', '_' and '-'", fs)
		}
		src.FS = fs
	}
	return src, nil
}

func parseNFS(u *url.URL) (Source, error) {
	if u.Host == "" {
		return Source{}, invalid("server host is empty")
	}
	if err := validHostPort(u.Host); err != nil {
		return Source{}, invalid("server host %q: %s", u.Host, err)
	}
	p, err := absServerPath(u.Path, "export path", false)
	if err != nil {
		return Source{}, err
	}
	src := Source{Kind: KindNFS, Host: strings.ToLower(u.Host), Path: p}
	q, err := parseQuery(u, "uid", "gid", "mountport", "conns", "rsize")
	if err != nil {
		return Source{}, err
	}
	num := func(key string, lo, hi uint64) (uint64, bool, error) {
		v, ok := q[key]
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < lo || n > hi || (len(v) > 1 && v[0] == '0') {
			return 0, false, invalid("%s %q: want a whole number from %d to %d", key, v, lo, hi)
		}
		return n, true, nil
	}
	if n, ok, err := num("uid", 0, 1<<32-2); err != nil {
		return Source{}, err
	} else if ok {
		src.UID = uint32(n)
	}
	if n, ok, err := num("gid", 0, 1<<32-2); err != nil {
		return Source{}, err
	} else if ok {
		src.GID = uint32(n)
	}
	if n, ok, err := num("mountport", 1, 65535); err != nil {
		return Source{}, err
	} else if ok {
		src.MountPort = int(n)
	}
	if n, ok, err := num("conns", 1, MaxNFSConns); err != nil {
		return Source{}, err
	} else if ok {
		src.Conns = int(n)
	}
	if v, ok := q["rsize"]; ok {
		// A size like every other (units.ParseSize: 1Mi, 1MiB, 1048576).
		n, err := units.ParseSize(v)
		if err != nil {
			return Source{}, invalid("rsize: %v", err)
		}
		if n < MinNFSReadSize || n > MaxNFSReadSize {
			return Source{}, invalid("rsize %q: want a size from 4Ki to 16Mi (%d to %d bytes), e.g. 1Mi", v, MinNFSReadSize, MaxNFSReadSize)
		}
		src.ReadSize = int(n)
	}
	return src, nil
}

// absServerPath cleans the path of a cephfs/nfs URL; rootOK says whether an
// empty path means "/".
func absServerPath(p, what string, rootOK bool) (string, error) {
	if p == "" || p == "/" {
		if rootOK {
			return "/", nil
		}
		return "", invalid("%s is empty", what)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalid("%s contains NUL", what)
	}
	p = path.Clean(p)
	if p == "/" && !rootOK { // "/.", "/..": empty once cleaned
		return "", invalid("%s is empty", what)
	}
	return p, nil
}

func parseMirror(list string) (Source, error) {
	if list == "" {
		return Source{}, invalid("mirror: no replicas (want mirror:URL1,URL2[,...])")
	}
	parts := strings.Split(list, ",")
	if len(parts) < 2 {
		return Source{}, invalid("mirror: needs at least 2 replicas, got 1")
	}
	src := Source{Kind: KindMirror, Replicas: make([]Source, 0, len(parts))}
	for i, part := range parts {
		r, err := parse(part, true)
		if err != nil {
			return Source{}, invalid("mirror replica %d: %v", i+1, err)
		}
		for j, prev := range src.Replicas {
			if prev.String() == r.String() {
				return Source{}, invalid("mirror replica %d duplicates replica %d", i+1, j+1)
			}
		}
		src.Replicas = append(src.Replicas, r)
	}
	return src, nil
}
