package source

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest name component, in bytes, that a dataset may
// expose (NAME_MAX on Linux).
const MaxNameLen = 255

// ValidName reports whether name can be one component of a dataset path: not
// empty, not "." or "..", no "/", no NUL or other control character, valid
// UTF-8, at most MaxNameLen bytes. Backends skip (and count) children whose
// names fail this check, so that nothing listed can escape the mount or
// confuse the kernel. Spaces and any printable Unicode are valid.
func ValidName(name string) bool {
	if name == "" || name == "." || name == ".." || len(name) > MaxNameLen {
		return false
	}
	if !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == '/' || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// validPrefix reports whether p is slash-separated ValidName components (no
// leading, trailing or doubled slash), the form of an s3 prefix.
func validPrefix(p string) bool {
	for comp := range strings.SplitSeq(p, "/") {
		if !ValidName(comp) {
			return false
		}
	}
	return true
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

// Redact returns raw with the password of any "scheme://user:password@"
// authority replaced by REDACTED (percent-encoded ones inside query values
// too): for showing a source URL that may not have parsed.
func Redact(raw string) string { return redact(raw) }

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
