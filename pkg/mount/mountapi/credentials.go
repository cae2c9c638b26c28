package mountapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Credential keys accepted on a credentials fd (FlagCredentialsFD): the
// names of the standard AWS environment variables for S3, and the names
// ceph-csi's secrets use for a CephFS client (its name without "client."
// and its base64 key).
const (
	CredentialAccessKeyID     = "AWS_ACCESS_KEY_ID"
	CredentialSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	CredentialSessionToken    = "AWS_SESSION_TOKEN"
	CredentialCephUserID      = "userID"
	CredentialCephUserKey     = "userKey"
)

// CredentialKeys are the keys ReadCredentials accepts, in the order a
// writer should use.
var CredentialKeys = []string{CredentialAccessKeyID, CredentialSecretAccessKey, CredentialSessionToken, CredentialCephUserID, CredentialCephUserKey}

// MaxCredentialsSize caps what ReadCredentials reads (a session token is
// a few KiB at most).
const MaxCredentialsSize = 16 << 10

// ErrCredentials: the credentials input is malformed (a usage error of the
// mount, exit code 2). Its messages name the line and the key, never a
// value.
var ErrCredentials = errors.New("mount: invalid configuration: bad credentials input")

// Credentials are what a credentials fd carries: an S3 pair (with an
// optional session token), a CephFS client name and key, or both.
type Credentials struct {
	AccessKey    string
	SecretKey    string
	SessionToken string
	CephUser     string
	CephKey      string
}

// EncodeCredentials returns the bytes a starter writes to the credentials
// pipe: lines, each KEY=VALUE with KEY one of CredentialKeys, one a line.
// Over MaxCredentialsSize bytes is an error, as the mount would refuse them.
func EncodeCredentials(lines []string) ([]byte, error) {
	b := []byte(strings.Join(lines, "\n") + "\n")
	if len(b) > MaxCredentialsSize {
		return nil, fmt.Errorf("mountapi: credentials are %d bytes, over the %d-byte limit", len(b), MaxCredentialsSize)
	}
	return b, nil
}

// Lines returns c as the KEY=VALUE lines of a credentials pipe, in
// CredentialKeys' order, its empty values left out.
func (c Credentials) Lines() []string {
	var lines []string
	for i, v := range []string{c.AccessKey, c.SecretKey, c.SessionToken, c.CephUser, c.CephKey} {
		if v != "" {
			lines = append(lines, CredentialKeys[i]+"="+v)
		}
	}
	return lines
}

// CredentialsPipe returns the read end of a pipe holding lines
// (EncodeCredentials), its write end closed: a starter's child inherits it
// and names it with FlagCredentialsFD. They fit the pipe's buffer (64 KiB;
// at most MaxCredentialsSize), so the write does not wait for the reader.
func CredentialsPipe(lines []string) (*os.File, error) {
	b, err := EncodeCredentials(lines)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("mountapi: credentials pipe: %w", err)
	}
	_, err = w.Write(b)
	if err = errors.Join(err, w.Close()); err != nil {
		r.Close()
		return nil, fmt.Errorf("mountapi: credentials pipe: %w", err)
	}
	return r, nil
}

// ReadCredentials reads credentials from r: KEY=VALUE lines (KEY one of
// CredentialKeys, each at most once; empty lines and empty values are
// skipped), at most MaxCredentialsSize bytes, until EOF. An S3 pair (access
// key id and secret key), a CephFS pair (userID and userKey), or both are
// required; half a pair is an error. Errors wrap ErrCredentials and
// never contain a value (nor an unknown key, which may be a value in the
// wrong place).
func ReadCredentials(r io.Reader) (Credentials, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxCredentialsSize+1))
	if err != nil {
		return Credentials{}, fmt.Errorf("%w: read: %w", ErrCredentials, err)
	}
	if len(b) > MaxCredentialsSize {
		return Credentials{}, fmt.Errorf("%w: over %d bytes", ErrCredentials, MaxCredentialsSize)
	}
	c, err := parseCredentials(b)
	if err == nil {
		err = c.check()
	}
	if err != nil {
		return Credentials{}, err
	}
	return c, nil
}

// parseCredentials reads the KEY=VALUE lines of b.
func parseCredentials(b []byte) (Credentials, error) {
	var c Credentials
	seen := map[string]bool{}
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		k, v, ok := strings.Cut(string(line), "=")
		switch {
		case !ok:
			return Credentials{}, fmt.Errorf("%w: line %d is not KEY=VALUE", ErrCredentials, i+1)
		case !slices.Contains(CredentialKeys, k):
			return Credentials{}, fmt.Errorf("%w: line %d: unknown key (want one of %s)", ErrCredentials, i+1, strings.Join(CredentialKeys, ", "))
		case seen[k]:
			return Credentials{}, fmt.Errorf("%w: line %d: %s given twice", ErrCredentials, i+1, k)
		case strings.ContainsAny(v, "\x00\r"):
			return Credentials{}, fmt.Errorf("%w: line %d: the value of %s holds a NUL or carriage return", ErrCredentials, i+1, k)
		}
		seen[k] = true
		switch k {
		case CredentialAccessKeyID:
			c.AccessKey = v
		case CredentialSecretAccessKey:
			c.SecretKey = v
		case CredentialSessionToken:
			c.SessionToken = v
		case CredentialCephUserID:
			c.CephUser = v
		case CredentialCephUserKey:
			c.CephKey = v
		}
	}
	return c, nil
}

// check requires whole pairs, and at least one.
func (c Credentials) check() error {
	s3Pair, cephPair := c.AccessKey != "" && c.SecretKey != "", c.CephUser != "" && c.CephKey != ""
	switch {
	case (c.AccessKey != "" || c.SecretKey != "" || c.SessionToken != "") && !s3Pair:
		return fmt.Errorf("%w: %s and %s are both required", ErrCredentials, CredentialAccessKeyID, CredentialSecretAccessKey)
	case (c.CephUser != "" || c.CephKey != "") && !cephPair:
		return fmt.Errorf("%w: %s and %s are both required", ErrCredentials, CredentialCephUserID, CredentialCephUserKey)
	case !s3Pair && !cephPair:
		return fmt.Errorf("%w: no credentials: want %s and %s, or %s and %s", ErrCredentials, CredentialAccessKeyID, CredentialSecretAccessKey, CredentialCephUserID, CredentialCephUserKey)
	}
	return nil
}

// ReadCredentialsFD reads credentials (ReadCredentials) from the inherited
// file descriptor fd, typically the read end of a pipe, and closes it.
func ReadCredentialsFD(fd int) (Credentials, error) {
	if fd < 0 {
		return Credentials{}, fmt.Errorf("%w: --%s %d: not a file descriptor", ErrCredentials, FlagCredentialsFD, fd)
	}
	f := os.NewFile(uintptr(fd), "credentials")
	if f == nil {
		return Credentials{}, fmt.Errorf("%w: --%s %d: not a file descriptor", ErrCredentials, FlagCredentialsFD, fd)
	}
	defer f.Close()
	c, err := ReadCredentials(f)
	if err != nil {
		return Credentials{}, fmt.Errorf("--%s %d: %w", FlagCredentialsFD, fd, err)
	}
	return c, nil
}
