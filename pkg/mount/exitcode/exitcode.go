// Package exitcode is the error contract between `cachefs mount` and the
// programs that start it (the CSI node plugin): the process's exit codes,
// their reason names, and the one structured line a failed mount writes
// last to its log. The driver is not always the mount's parent (a mounter
// may start it), so it reads the code from that line, not from wait(2).
//
// It is a leaf: it imports only the standard library and knows nothing of
// backends, caches, FUSE or gRPC (pkg/mount classifies errors into codes,
// pkg/csi maps codes to gRPC status codes).
package exitcode

import (
	"bytes"
	"encoding/json"
	"log/slog"
)

// Code is the exit status of `cachefs mount`.
type Code int

// Exit codes of `cachefs mount`. Documented in docs/CSI.md and in
// `cachefs mount --help`; never renumber one.
const (
	OK Code = 0
	// Internal: anything not below (a corrupt manifest, a FUSE failure,
	// a crash).
	Internal Code = 1
	// Usage: invalid arguments or source URL (unknown scheme, bad flag
	// value, missing required flag).
	Usage Code = 2
	// NotFound: the source (directory, bucket, prefix) or the manifest
	// does not exist.
	NotFound Code = 3
	// PermissionDenied: the source refused access (credentials refused,
	// bucket policy, EACCES).
	PermissionDenied Code = 4
	// Unavailable: the source's server cannot be reached or keeps failing
	// (connection refused, DNS, timeouts, 5xx after retries).
	Unavailable Code = 5
	// CacheLocked: another mount (or store) holds the cache directory.
	CacheLocked Code = 6
	// CacheUnusable: the cache directory cannot be created, locked or
	// written (not a directory, read-only, full).
	CacheUnusable Code = 7
	// Mountpoint: the mount point is missing, not a directory, or the
	// FUSE mount on it failed.
	Mountpoint Code = 8
)

var reasons = map[Code]string{
	OK:               "ok",
	Internal:         "internal",
	Usage:            "invalid",
	NotFound:         "not_found",
	PermissionDenied: "permission_denied",
	Unavailable:      "unavailable",
	CacheLocked:      "cache_locked",
	CacheUnusable:    "cache_unusable",
	Mountpoint:       "mountpoint",
}

// summaries are the one-line meanings `cachefs mount --help` lists.
var summaries = map[Code]string{
	Internal:         "anything else (e.g. a corrupt manifest)",
	Usage:            "bad arguments or source URL",
	NotFound:         "the source (directory, bucket, prefix) or manifest is missing",
	PermissionDenied: "the source refused access (credentials, policy, EACCES)",
	Unavailable:      "the source's server is unreachable or keeps failing",
	CacheLocked:      "another mount holds the cache directory",
	CacheUnusable:    "the cache directory cannot be created, locked or written",
	Mountpoint:       "the mount point is missing, not a directory, or FUSE failed",
}

// Summary is the code's one-line meaning ("" for OK).
func (c Code) Summary() string { return summaries[c] }

// Codes lists every code, in order.
func Codes() []Code {
	return []Code{OK, Internal, Usage, NotFound, PermissionDenied, Unavailable, CacheLocked, CacheUnusable, Mountpoint}
}

// Reason is the code's stable name in the failure line ("not_found"…);
// an unknown code's is "internal".
func (c Code) Reason() string {
	if r, ok := reasons[c]; ok {
		return r
	}
	return reasons[Internal]
}

func (c Code) String() string { return c.Reason() }

// The failure line: msg FailureMsg at level ERROR with these keys. With
// --log-format json it is one JSON object, e.g.
//
//	{"time":"…","level":"ERROR","msg":"mount failed","exitCode":3,"reason":"not_found","error":"…"}
//
// The error text never holds credentials (backends never print them).
const (
	FailureMsg  = "mount failed"
	KeyExitCode = "exitCode"
	KeyReason   = "reason"
	KeyError    = "error"
)

// LogFailure writes the failure line of a mount that exits with code.
func LogFailure(log *slog.Logger, code Code, err error) {
	log.Error(FailureMsg, KeyExitCode, int(code), KeyReason, code.Reason(), KeyError, err.Error())
}

// Failure is a failure line read back from a JSON log.
type Failure struct {
	Code   Code   `json:"exitCode"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
}

// LastFailure returns the last failure line of a JSON log (lines that are
// not JSON, or not a failure line, are skipped), and whether there is one.
func LastFailure(log []byte) (Failure, bool) {
	lines := bytes.Split(log, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var f struct {
			Msg string `json:"msg"`
			Failure
			Code *Code `json:"exitCode"`
		}
		if json.Unmarshal(line, &f) != nil || f.Msg != FailureMsg || f.Code == nil {
			continue
		}
		f.Failure.Code = *f.Code
		return f.Failure, true
	}
	return Failure{}, false
}
