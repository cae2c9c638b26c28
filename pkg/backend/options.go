package backend

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Defaults applied by Options.WithDefaults to zero Options fields.
const (
	DefaultMaxAttempts    = 4
	DefaultBaseDelay      = 50 * time.Millisecond
	DefaultMaxDelay       = 2 * time.Second
	DefaultRequestTimeout = 30 * time.Second
)

// Options configures the Open of every backend (pkg/backend/all.Open). The
// zero value is ready to use; zero fields take the documented defaults.
// Options are validated in one place, WithDefaults, which each Open calls.
type Options struct {
	// Credentials override the standard credential chain of network
	// backends (s3), e.g. with values from CSI node-stage secrets. When
	// zero, s3 uses, in order: the environment (AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the shared credentials file
	// (~/.aws/credentials or AWS_SHARED_CREDENTIALS_FILE, profile
	// AWS_PROFILE), then the instance/pod IAM role; with none of those the
	// requests are anonymous. Ignored by posix.
	Credentials Credentials

	// Retry bounds the retries of transient failures of network backends.
	Retry RetryPolicy

	// RequestTimeout bounds one request attempt, including reading its
	// response body. Default DefaultRequestTimeout (30s). A timed-out
	// attempt is retried like any transient failure.
	RequestTimeout time.Duration

	// Logger receives warnings (skipped names, retries). Default: discard.
	// Credentials are never logged.
	Logger *slog.Logger

	// Transport, when set, carries the HTTP requests of network backends
	// (tests, fault injection, custom TLS). Default: minio-go's transport.
	Transport http.RoundTripper

	// Egress, when set, makes every connection of network backends (s3's
	// default transport, nfs's RPC connections, each replica of a mirror,
	// a manifest fetched by URL with these Options) and checks a cephfs
	// monitor before libcephfs connects to it; see Egress. nil: a plain
	// net.Dialer, any destination (a mount an admin runs by hand). A set
	// Transport is used as given.
	Egress Egress

	// Lazy skips the probe Open makes of network sources (one one-key
	// listing), so a missing bucket or bad credentials surface at the first
	// request instead. For callers that make a request of their own right
	// away, such as a mount fetching its manifest.
	Lazy bool
}

// Credentials are an S3 access key pair with an optional session token, or
// a CephFS client name and key (the userID/userKey of ceph-csi's secrets).
// Their String, GoString and LogValue never reveal the secret parts.
type Credentials struct {
	AccessKey    string
	SecretKey    string
	SessionToken string

	// CephUser is the cephfs client name without "client." (e.g. "admin");
	// it overrides the user of the cephfs:// URL. CephKey is that client's
	// base64 key; when empty, cephfs reads the keyring named by the Ceph
	// configuration (CEPH_CONF, CEPH_KEYRING). Ignored by other kinds.
	CephUser string
	CephKey  string
}

// IsZero reports whether no credentials are set.
func (c Credentials) IsZero() bool { return c == Credentials{} }

// String returns a redacted form safe for logs.
func (c Credentials) String() string {
	if c.IsZero() {
		return "Credentials{}"
	}
	var parts []string
	if c.AccessKey != "" || c.SecretKey != "" {
		parts = append(parts, "AccessKey: "+redactKey(c.AccessKey), "SecretKey: REDACTED")
	}
	if c.CephUser != "" || c.CephKey != "" {
		parts = append(parts, "CephUser: "+c.CephUser)
		if c.CephKey != "" {
			parts = append(parts, "CephKey: REDACTED")
		}
	}
	return "Credentials{" + strings.Join(parts, ", ") + "}"
}

// GoString is String, so that %#v does not print secrets either.
func (c Credentials) GoString() string { return c.String() }

// LogValue implements slog.LogValuer with the redacted form.
func (c Credentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

func redactKey(k string) string {
	if len(k) <= 4 {
		return "****"
	}
	return k[:4] + "****"
}

// RetryPolicy bounds retries: exponential backoff with full jitter, the
// sleep before retry n (n ≥ 1) drawn uniformly from
// [0, min(MaxDelay, BaseDelay·2^(n-1))] (github.com/cenkalti/backoff/v5).
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts, first one included.
	// Default DefaultMaxAttempts (4); 1 disables retries.
	MaxAttempts int
	// BaseDelay is the backoff unit. Default DefaultBaseDelay (50ms).
	BaseDelay time.Duration
	// MaxDelay caps one backoff sleep. Default DefaultMaxDelay (2s).
	MaxDelay time.Duration
}

// WithDefaults validates o and fills in the defaults.
func (o Options) WithDefaults() (Options, error) {
	if o.Retry.MaxAttempts < 0 || o.Retry.BaseDelay < 0 || o.Retry.MaxDelay < 0 || o.RequestTimeout < 0 {
		return o, fmt.Errorf("backend: options: negative retry or timeout setting")
	}
	if o.Retry.MaxAttempts == 0 {
		o.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if o.Retry.BaseDelay == 0 {
		o.Retry.BaseDelay = DefaultBaseDelay
	}
	if o.Retry.MaxDelay == 0 {
		o.Retry.MaxDelay = DefaultMaxDelay
	}
	if o.Retry.MaxDelay < o.Retry.BaseDelay {
		o.Retry.MaxDelay = o.Retry.BaseDelay
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c := o.Credentials; (c.AccessKey != "" || c.SecretKey != "" || c.SessionToken != "") && (c.AccessKey == "" || c.SecretKey == "") {
		return o, fmt.Errorf("backend: options: credentials need both an access key and a secret key")
	}
	return o, nil
}
