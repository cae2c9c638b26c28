package mount

import "strconv"

// Command is the cachefs subcommand that runs a mount in the foreground:
// `cachefs mount SOURCE MOUNTPOINT --flags…`.
const Command = "mount"

// Flag names of `cachefs mount`, defined once: cmd/cachefs registers its
// flags under these names and CommandOptions.Args spells its command lines
// with them, so the CSI driver and the CLI cannot drift apart.
const (
	FlagCacheDir            = "cache-dir"
	FlagCacheSize           = "cache-size"
	FlagPolicy              = "policy"
	FlagManifest            = "manifest"
	FlagMetricsAddr         = "metrics-addr"
	FlagAllowOther          = "allow-other"
	FlagWholeFileMax        = "whole-file-max"
	FlagBlockSize           = "block-size"
	FlagReadahead           = "readahead"
	FlagReadaheadFiles      = "readahead-files"
	FlagListingCacheEntries = "listing-cache-entries"
	FlagReadTimeout         = "read-timeout"
	FlagFuseDebug           = "fuse-debug"
	// FlagCredentialsFD names an inherited file descriptor (a pipe) to read
	// S3 credentials from (ReadCredentials) instead of the environment.
	FlagCredentialsFD = "credentials-fd"
	// FlagLogFormat is a global flag of cachefs (text or json).
	FlagLogFormat = "log-format"
)

// LogFormatJSON is the FlagLogFormat value that makes every log line,
// the failure line included (see package exitcode), one JSON object.
const LogFormatJSON = "json"

// CommandOptions is one `cachefs mount` command line, as another program
// (the CSI node plugin) starts it. It is a value; Args builds the
// arguments. Zero optional fields are left out, so the CLI's defaults apply.
type CommandOptions struct {
	Source     string // dataset URL; required
	Mountpoint string // required
	CacheDir   string // required
	CacheSize  int64  // bytes; required
	Policy     string // "" leaves the CLI's default (nr)
	Manifest   string // "" leaves the default (ManifestAuto)
	// ReadaheadFiles: 0 leaves it off.
	ReadaheadFiles int
	// LogFormat: "" leaves the CLI's default (text); LogFormatJSON for a
	// log that programs read.
	LogFormat string
	// CredentialsFD, when > 0, is the inherited file descriptor the
	// credentials are read from (FlagCredentialsFD): the starter passes the
	// read end of a pipe there (exec.Cmd.ExtraFiles[0] is fd 3). 0 leaves
	// the flag out: credentials from the environment or the standard chain.
	CredentialsFD int
}

// Args returns the arguments after the program name:
// mount SOURCE MOUNTPOINT --cache-dir DIR --cache-size BYTES [--flags…].
func (o CommandOptions) Args() []string {
	args := []string{Command, o.Source, o.Mountpoint,
		"--" + FlagCacheDir, o.CacheDir,
		"--" + FlagCacheSize, strconv.FormatInt(o.CacheSize, 10),
	}
	add := func(flag, value string) {
		if value != "" {
			args = append(args, "--"+flag, value)
		}
	}
	add(FlagPolicy, o.Policy)
	add(FlagLogFormat, o.LogFormat)
	add(FlagManifest, o.Manifest)
	if o.ReadaheadFiles > 0 {
		add(FlagReadaheadFiles, strconv.Itoa(o.ReadaheadFiles))
	}
	if o.CredentialsFD > 0 {
		add(FlagCredentialsFD, strconv.Itoa(o.CredentialsFD))
	}
	return args
}
