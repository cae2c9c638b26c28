package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ErrPlainHTTP is returned (wrapped) when a push would talk plain HTTP to
// a registry that is not on loopback without PushOptions.Insecure.
var ErrPlainHTTP = errors.New("imagebuild: plain HTTP to a registry not on loopback (use --insecure if the admin means it)")

// PushOptions are the settings of Push.
type PushOptions struct {
	// Insecure allows plain HTTP to any registry (HTTPS certificates are
	// verified either way). Without it only localhost and loopback
	// addresses may be plain HTTP; every other registry is HTTPS only,
	// RFC 1918 addresses included (which go-containerregistry would
	// otherwise retry over HTTP).
	Insecure bool
	// Keychain resolves credentials; nil: authn.DefaultKeychain (the
	// docker config, $DOCKER_CONFIG/config.json or ~/.docker/config.json,
	// and its credential helpers). Credentials are never logged.
	Keychain authn.Keychain
}

// RegistryRef is the reference an archive's image ref ("NAME:TAG") gets in
// registry ("host[:port][/path]"): "registry/NAME:TAG", or
// "registry/NAME:tag" when tag is not empty.
func RegistryRef(registry, ref, tag string) (string, error) {
	t, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	registry = strings.TrimSuffix(registry, "/")
	if registry == "" || strings.Contains(registry, "://") {
		return "", fmt.Errorf("imagebuild: registry %q: want host[:port][/path], no scheme", registry)
	}
	if tag == "" {
		tag = t.TagStr()
	}
	out := registry + "/" + strings.TrimPrefix(t.RepositoryStr(), "library/") + ":" + tag
	if _, err := name.NewTag(out, name.StrictValidation); err != nil {
		return "", fmt.Errorf("imagebuild: %w", err)
	}
	return out, nil
}

// Push pushes the one image of the Docker-archive tar at path to dst
// ("host[:port]/NAME:TAG").
func Push(ctx context.Context, path, dst string, o PushOptions) error {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	keychain := o.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	base := remote.DefaultTransport.(*http.Transport).Clone()
	opts := []crane.Option{crane.WithContext(ctx), crane.WithAuthFromKeychain(keychain),
		crane.WithTransport(plainHTTPGuard{next: base, allow: o.Insecure})}
	if o.Insecure {
		opts = append(opts, crane.Insecure)
	}
	if err := crane.Push(img, dst, opts...); err != nil {
		return fmt.Errorf("imagebuild: push %s to %s: %w", path, dst, err)
	}
	return nil
}

// plainHTTPGuard refuses requests over plain HTTP to hosts other than
// localhost and loopback addresses unless allow: go-containerregistry
// falls back to HTTP for private addresses by itself, and the brief of
// `make image-push` is HTTPS unless the admin says --insecure.
type plainHTTPGuard struct {
	next  http.RoundTripper
	allow bool
}

func (g plainHTTPGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !g.allow && !IsLoopbackHost(r.URL.Hostname()) {
		return nil, fmt.Errorf("%w: %s", ErrPlainHTTP, r.URL.Host)
	}
	return g.next.RoundTrip(r)
}

// IsLoopbackHost reports whether host (no port) is "localhost" or a
// loopback IP address (127.0.0.0/8, ::1).
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
