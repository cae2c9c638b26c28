package manifest

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Entry tags of the body (see the package doc).
const (
	tagDir       = 0
	tagRaw       = 1
	tagPosix     = 2
	tagHex       = 3
	tagHexN      = 4
	tagPosixCI   = 5 // format version 2 and later
	maxHexBytes  = 64
	minEntrySize = 4 // shared + suffixLen + ≥1 name byte + tag: the fewest body bytes an entry takes
)

// ValidVersion reports whether v can be stored as a version token: at most
// MaxVersionLen bytes of valid UTF-8 without control characters (it becomes
// an HTTP If-Match header for S3).
func ValidVersion(v string) bool {
	if len(v) > MaxVersionLen || !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if !versionRune(r) {
			return false
		}
	}
	return true
}

// validVersionBytes is ValidVersion of a version in the body, without
// copying it to a string (1 KiB per file of garbage otherwise).
func validVersionBytes(v []byte) bool {
	if len(v) > MaxVersionLen || !utf8.Valid(v) {
		return false
	}
	for len(v) > 0 {
		r, n := utf8.DecodeRune(v)
		if !versionRune(r) {
			return false
		}
		v = v[n:]
	}
	return true
}

func versionRune(r rune) bool { return r >= 0x20 && r != 0x7f && (r < 0x80 || r >= 0xa0) }

// appendVersion appends the tag and payload encoding version v of a file of
// the given size. v must satisfy ValidVersion.
func appendVersion(b []byte, v string, size int64) []byte {
	if mt, ct, ino, ok := parsePosixCI(v, size); ok {
		b = append(b, tagPosixCI)
		b = binary.AppendVarint(b, mt)
		b = binary.AppendVarint(b, ct-mt)
		return binary.AppendUvarint(b, ino)
	}
	if mt, s, ok := strings.Cut(v, "-"); ok && s == strconv.FormatInt(size, 10) {
		if n, err := strconv.ParseInt(mt, 10, 64); err == nil && strconv.FormatInt(n, 10) == mt {
			b = append(b, tagPosix)
			return binary.AppendVarint(b, n)
		}
	}
	h, rest, hasN := strings.Cut(v, "-")
	if isLowerHex(h) {
		raw, _ := hex.DecodeString(h)
		if !hasN {
			b = append(b, tagHex, byte(len(raw)))
			return append(b, raw...)
		}
		if n, err := strconv.ParseUint(rest, 10, 64); err == nil && strconv.FormatUint(n, 10) == rest {
			b = append(b, tagHexN, byte(len(raw)))
			b = append(b, raw...)
			return binary.AppendUvarint(b, n)
		}
	}
	b = append(b, tagRaw)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// parsePosixCI splits a posix version "MTIMENANOS-SIZE-CTIMENANOS-INO" of a
// file of the given size, each number in canonical decimal, when ctime −
// mtime does not overflow (anything else is stored raw).
func parsePosixCI(v string, size int64) (mtime, ctime int64, ino uint64, ok bool) {
	f := strings.Split(v, "-")
	if len(f) != 4 || f[1] != strconv.FormatInt(size, 10) {
		return 0, 0, 0, false
	}
	mtime, err1 := strconv.ParseInt(f[0], 10, 64)
	ctime, err2 := strconv.ParseInt(f[2], 10, 64)
	ino, err3 := strconv.ParseUint(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil ||
		strconv.FormatInt(mtime, 10) != f[0] || strconv.FormatInt(ctime, 10) != f[2] || strconv.FormatUint(ino, 10) != f[3] {
		return 0, 0, 0, false
	}
	if d := ctime - mtime; (d < 0) != (ctime < mtime) {
		return 0, 0, 0, false // ctime − mtime overflows
	}
	return mtime, ctime, ino, true
}

func isLowerHex(s string) bool {
	if s == "" || len(s)%2 != 0 || len(s) > 2*maxHexBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

var errVersion = errors.New("bad version encoding")

// readVersion parses the payload of a file entry with the given tag from
// b and returns the number of bytes it took. It validates everything a
// later formatVersion relies on.
func readVersion(tag byte, b []byte) (int, error) {
	switch tag {
	case tagRaw:
		n, k := binary.Uvarint(b)
		if k <= 0 || n > MaxVersionLen || uint64(len(b)-k) < n {
			return 0, errVersion
		}
		if !validVersionBytes(b[k : k+int(n)]) {
			return 0, errVersion
		}
		return k + int(n), nil
	case tagPosix:
		_, k := binary.Varint(b)
		if k <= 0 {
			return 0, errVersion
		}
		return k, nil
	case tagPosixCI:
		mt, k1 := binary.Varint(b)
		if k1 <= 0 {
			return 0, errVersion
		}
		d, k2 := binary.Varint(b[k1:])
		if k2 <= 0 {
			return 0, errVersion
		}
		if ct := mt + d; (ct < mt) != (d < 0) {
			return 0, errVersion // ctime overflows
		}
		_, k3 := binary.Uvarint(b[k1+k2:])
		if k3 <= 0 {
			return 0, errVersion
		}
		return k1 + k2 + k3, nil
	case tagHex, tagHexN:
		if len(b) < 1 || b[0] == 0 || b[0] > maxHexBytes || len(b) < 1+int(b[0]) {
			return 0, errVersion
		}
		k := 1 + int(b[0])
		if tag == tagHexN {
			_, m := binary.Uvarint(b[k:])
			if m <= 0 {
				return 0, errVersion
			}
			k += m
		}
		return k, nil
	}
	return 0, errVersion
}

// versionLen returns the length of the payload of a file entry with the
// given tag at the start of b, which readVersion validated.
func versionLen(tag byte, b []byte) int {
	switch tag {
	case tagRaw:
		n, k := binary.Uvarint(b)
		return k + int(n)
	case tagPosix:
		return varintLen(b)
	case tagPosixCI:
		k := varintLen(b)
		k += varintLen(b[k:])
		return k + varintLen(b[k:])
	case tagHex:
		return 1 + int(b[0])
	case tagHexN:
		k := 1 + int(b[0])
		return k + varintLen(b[k:])
	}
	return 0
}

// varintLen returns the length of the (u)varint at the start of b.
func varintLen(b []byte) int {
	for i, c := range b {
		if c < 0x80 {
			return i + 1
		}
	}
	return len(b)
}

// formatVersion turns a stored tag+payload back into the version string.
// enc was validated by readVersion.
func formatVersion(enc []byte, size int64) string {
	if len(enc) == 0 {
		return ""
	}
	p := enc[1:]
	switch enc[0] {
	case tagRaw:
		_, k := binary.Uvarint(p)
		return string(p[k:])
	case tagPosix:
		n, _ := binary.Varint(p)
		return strconv.FormatInt(n, 10) + "-" + strconv.FormatInt(size, 10)
	case tagPosixCI:
		mt, k1 := binary.Varint(p)
		d, k2 := binary.Varint(p[k1:])
		ino, _ := binary.Uvarint(p[k1+k2:])
		b := make([]byte, 0, 64)
		b = strconv.AppendInt(b, mt, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, size, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, mt+d, 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, ino, 10)
		return string(b)
	case tagHex:
		return hex.EncodeToString(p[1 : 1+int(p[0])])
	case tagHexN:
		k := 1 + int(p[0])
		n, _ := binary.Uvarint(p[k:])
		return hex.EncodeToString(p[1:k]) + "-" + strconv.FormatUint(n, 10)
	}
	return ""
}
