package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Peer groups. Every peer request names its group
// (HeaderGroup) and proves it with the group's key, not with the shared
// token: GroupKey(token, group), an HMAC-SHA256 under the token. A server
// serves its own group only, so the key of one group opens no other:
//
//   - under the CSI driver the group id is itself an HMAC under the token of
//     the source, the manifest and the volume's credentials (pkg/csi
//     peerGroup): another tenant's mount of the same source, read with
//     other (or revoked) credentials, is another group, and a stale peer
//     entry that points at a port now handed to another dataset reaches a
//     server of another group, which refuses it (403) before reading;
//   - a standalone `cachefs mount --cache-scope cluster --peers …` without
//     --peer-group takes DatasetGroup(source ID): the static setups of one
//     admin keep working, every mount of one source in one group.
//
// HMAC from the standard library: crypto/hmac is the well-kept primitive
// for a keyed hash, and hmac.Equal compares in constant time.

// groupKeyLabel separates group keys from every other use of the token
// (pkg/csi derives group ids under the same token with another layout).
const groupKeyLabel = "epochfs peer group key v1\x00"

// GroupKey is the key of group under the shared token: HMAC-SHA256(token,
// "epochfs peer group key v1" NUL group). Requests carry it hex-encoded as
// their bearer credential; it is a secret (never logged).
func GroupKey(token []byte, group string) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(groupKeyLabel))
	m.Write([]byte(group))
	return m.Sum(nil)
}

// groupAuth is the Authorization header value of group's key.
func groupAuth(key []byte) string { return "Bearer " + hex.EncodeToString(key) }

// DatasetGroup is the group of a mount without an explicit one (a
// standalone `cachefs mount --cache-scope cluster` without --peer-group):
// derived from the dataset identity (the backend ID, which holds no
// credentials), so every mount of one source forms one group.
func DatasetGroup(dataset string) string {
	sum := sha256.Sum256([]byte("epochfs peer dataset group v1\x00" + dataset))
	return "d-" + hex.EncodeToString(sum[:16])
}

// MaxGroupLen bounds a group id (a header of every request).
const MaxGroupLen = 128

// ValidGroup checks a group id: 1–MaxGroupLen bytes of [A-Za-z0-9._:-].
func ValidGroup(g string) error {
	if g == "" || len(g) > MaxGroupLen {
		return fmt.Errorf("%w: peer group %q must be 1 to %d bytes", ErrInvalid, g, MaxGroupLen)
	}
	for _, c := range g {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return fmt.Errorf("%w: peer group %q: only letters, digits and . _ - : are allowed", ErrInvalid, g)
		}
	}
	return nil
}
