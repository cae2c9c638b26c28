package backend

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/epochfs/epochfs/pkg/units"
)

// Kind names the type of a dataset source.
type Kind string

// Source kinds.
const (
	KindPosix  Kind = "posix"  // a local or kernel-mounted directory
	KindS3     Kind = "s3"     // a bucket prefix on any S3-compatible server
	KindCephFS Kind = "cephfs" // CephFS through libcephfs (builds with the ceph tag)
	KindNFS    Kind = "nfs"    // NFSv3 through a pure-Go client
	KindMirror Kind = "mirror" // the same dataset in several places
)

// Source is a parsed dataset source URL. Which fields are set depends on
// Kind; the others are zero. A Source never holds credentials: Parse rejects
// URLs that carry them, and credentials reach Open only through Options.
//
// Source is comparable with reflect.DeepEqual, and Parse(s.String()) yields
// a Source equal to s for every s returned by Parse.
type Source struct {
	Kind Kind

	// Path is the absolute, cleaned directory for posix; the absolute path
	// inside the file system for cephfs; the absolute export path for nfs.
	Path string

	// Bucket and Prefix locate an s3 dataset. Prefix is a clean relative
	// path (see CleanPath) without a trailing slash; "" is the whole bucket.
	Bucket string
	Prefix string
	// Endpoint is the S3 server as "scheme://host[:port]"; empty means AWS.
	Endpoint string
	// Region is the S3 region; empty lets the client discover it.
	Region string
	// PathStyle selects path-style requests (http://host/bucket/key) over
	// virtual-host style. It defaults to true when Endpoint is set.
	PathStyle bool

	// Host is "host[:port]" of the cephfs monitor or the nfs server.
	Host string
	// User is the cephfs client name (e.g. "admin"); never a secret.
	User string
	// FS is the cephfs file system name; empty means the default one.
	FS string

	// UID and GID are the AUTH_UNIX identity of nfs requests (the uid and
	// gid options; default 0, root, which servers may squash).
	UID, GID uint32
	// MountPort is the nfs server's MOUNT port (the mountport option); 0
	// means the port of Host when the server serves MOUNT there, else the
	// portmapper's answer.
	MountPort int
	// Conns is the number of nfs connections reads are spread over (the
	// conns option, 1 to MaxNFSConns); 0 means DefaultNFSConns.
	Conns int
	// ReadSize caps one nfs READ in bytes (the rsize option, MinNFSReadSize
	// to MaxNFSReadSize); 0 means DefaultNFSReadSize. The server's rtmax
	// lowers it.
	ReadSize int

	// Replicas are the places of a mirror, in the order given (at least 2,
	// none of them a mirror).
	Replicas []Source
}

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
		return Source{}, fmt.Errorf("backend: source %q: %w", redact(raw), err)
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
		if _, err := CleanPath(prefix); err != nil {
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

// String returns the canonical URL of the source; it never contains
// credentials (a Source cannot hold any). Parse(s.String()) returns s.
func (s Source) String() string {
	switch s.Kind {
	case KindPosix:
		if strings.ContainsFunc(s.Path, needsFileURL) {
			return "file://" + escapePath(s.Path)
		}
		return s.Path
	case KindS3:
		var b strings.Builder
		b.WriteString("s3://")
		b.WriteString(s.Bucket)
		if s.Prefix != "" {
			b.WriteString("/")
			b.WriteString(escapePath(s.Prefix))
		}
		q := url.Values{}
		if s.Endpoint != "" {
			q.Set("endpoint", s.Endpoint)
		}
		if s.Region != "" {
			q.Set("region", s.Region)
		}
		if s.PathStyle != (s.Endpoint != "") {
			q.Set("pathStyle", strconv.FormatBool(s.PathStyle))
		}
		if len(q) > 0 {
			b.WriteString("?")
			b.WriteString(q.Encode())
		}
		return b.String()
	case KindCephFS:
		var b strings.Builder
		b.WriteString("cephfs://")
		if s.User != "" {
			b.WriteString(s.User)
			b.WriteString("@")
		}
		b.WriteString(s.Host)
		b.WriteString(escapePath(s.Path))
		if s.FS != "" {
			b.WriteString("?fs=")
			b.WriteString(url.QueryEscape(s.FS))
		}
		return b.String()
	case KindNFS:
		q := url.Values{}
		if s.UID != 0 {
			q.Set("uid", strconv.FormatUint(uint64(s.UID), 10))
		}
		if s.GID != 0 {
			q.Set("gid", strconv.FormatUint(uint64(s.GID), 10))
		}
		if s.MountPort != 0 {
			q.Set("mountport", strconv.Itoa(s.MountPort))
		}
		if s.Conns != 0 {
			q.Set("conns", strconv.Itoa(s.Conns))
		}
		if s.ReadSize != 0 {
			q.Set("rsize", strconv.Itoa(s.ReadSize))
		}
		out := "nfs://" + s.Host + escapePath(s.Path)
		if len(q) > 0 {
			out += "?" + q.Encode()
		}
		return out
	case KindMirror:
		parts := make([]string, len(s.Replicas))
		for i, r := range s.Replicas {
			parts[i] = r.String()
		}
		return "mirror:" + strings.Join(parts, ",")
	default:
		return "invalid:" + string(s.Kind)
	}
}

// needsFileURL reports runes that a plain path cannot carry through Parse
// (a comma splits mirror replicas; control characters are rejected).
func needsFileURL(r rune) bool { return r == ',' || r < 0x20 || r == 0x7f }

// escapePath percent-encodes everything in p except unreserved characters
// and '/', so that the result survives url.Parse and mirror splitting.
func escapePath(p string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '/' || c == '-' || c == '.' || c == '_' || c == '~' ||
			('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// validBucket applies the S3 bucket naming rules.
func validBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return errors.New("must be 3 to 63 characters long")
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(('a' <= c && c <= 'z') || ('0' <= c && c <= '9') || c == '.' || c == '-') {
			return errors.New("only lowercase letters, digits, '.' and '-' are allowed")
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return errors.New("must begin and end with a letter or digit")
	}
	if strings.Contains(b, "..") {
		return errors.New("must not contain \"..\"")
	}
	if net.ParseIP(b) != nil {
		return errors.New("must not be formatted as an IP address")
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(b, p) {
			return fmt.Errorf("must not start with %q", p)
		}
	}
	for _, s := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(b, s) {
			return fmt.Errorf("must not end with %q", s)
		}
	}
	return nil
}

func isAlnum(c byte) bool { return ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') }

func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !(isAlnum(c) || c == '-') {
			return false
		}
	}
	return true
}

func validIdent(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || ('A' <= c && c <= 'Z') || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validHostPort checks "host", "host:port" or "[ipv6]:port".
func validHostPort(hp string) error {
	host, port := hp, ""
	if h, p, err := net.SplitHostPort(hp); err == nil {
		host, port = h, p
		if port == "" {
			return errors.New("port is empty")
		}
	} else if strings.HasPrefix(hp, "[") && strings.HasSuffix(hp, "]") {
		host = hp[1 : len(hp)-1]
	} else if strings.Contains(hp, ":") {
		return errors.New("want host[:port]")
	}
	if host == "" {
		return errors.New("host is empty")
	}
	if strings.Contains(hp, "[") && net.ParseIP(host) == nil {
		return errors.New("bad IPv6 address")
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(isAlnum(c) || ('A' <= c && c <= 'Z') || c == '.' || c == '-' || c == ':' || c == '_' || c == '%') {
			return fmt.Errorf("bad character %q in host", c)
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' || port[0] == '+' {
			return fmt.Errorf("port %q must be 1-65535", port)
		}
	}
	return nil
}

// redact hides the password of any "scheme://user:password@" authority in
// raw, including percent-encoded ones inside query values, so that error
// messages never echo a secret.
func redact(raw string) string {
	out := raw
	for _, sep := range []string{"://", "%3A%2F%2F", "%3a%2f%2f"} {
		var b strings.Builder
		rest := out
		for {
			i := strings.Index(rest, sep)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i+len(sep)])
			rest = rest[i+len(sep):]
			end := strings.IndexAny(rest, "/?#&,")
			if sep != "://" {
				if j := strings.Index(strings.ToUpper(rest), "%2F"); j >= 0 && (end < 0 || j < end) {
					end = j
				}
			}
			if end < 0 {
				end = len(rest)
			}
			auth := rest[:end]
			at := max(strings.LastIndex(auth, "@"), strings.LastIndex(strings.ToUpper(auth), "%40"))
			if at >= 0 {
				b.WriteString("REDACTED")
				rest = rest[at:]
			}
		}
		out = b.String()
	}
	return out
}

// PosixVersionScheme is Source.VersionScheme of a posix directory: its
// versions are "MTIMENANOS-SIZE-CTIMENANOS-INO" (see Entry.Version).
const PosixVersionScheme = "posix-mtime-size-ctime-ino"

// VersionScheme names the format of the versions the source's backend
// reports, for whoever keys data by them (the cache records it and drops
// entries keyed under another scheme, rather than keeping them unreachable
// and holding their room). It is "" for the formats of the first release
// (S3 ETags), PosixVersionScheme for a posix directory since its versions
// gained the ctime and inode, and for a mirror "mirror:" + that when a
// replica is posix (mirror versions embed the replica's own), whichever
// replicas are up.
func (s Source) VersionScheme() string {
	switch s.Kind {
	case KindPosix:
		return PosixVersionScheme
	case KindMirror:
		for _, r := range s.Replicas {
			if r.Kind == KindPosix {
				return "mirror:" + PosixVersionScheme
			}
		}
	}
	return ""
}
