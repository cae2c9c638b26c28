package source

import (
	"net/url"
	"strconv"
	"strings"
)

// String returns the canonical URL of the source; it never contains
// credentials (a Source cannot hold any). Parse(s.String()) returns s.
func (s Source) String() string {
	switch s.Kind {
	case KindPosix:
		if strings.ContainsFunc(s.Path, needsFileURL) {
			return "file://" + EscapePath(s.Path)
		}
		return s.Path
	case KindS3:
		var b strings.Builder
		b.WriteString("s3://")
		b.WriteString(s.Bucket)
		if s.Prefix != "" {
			b.WriteString("/")
			b.WriteString(EscapePath(s.Prefix))
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
		b.WriteString(EscapePath(s.Path))
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
		out := "nfs://" + s.Host + EscapePath(s.Path)
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

// EscapePath percent-encodes everything in p except unreserved characters
// and '/', so that the result survives url.Parse and mirror splitting.
func EscapePath(p string) string {
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
