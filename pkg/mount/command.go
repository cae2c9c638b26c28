package mount

import (
	"fmt"
	"strconv"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/fusefs"
)

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
	FlagManifestMaxMemory   = "manifest-max-memory"
	FlagMetricsAddr         = "metrics-addr"
	FlagAllowOther          = "allow-other"
	FlagWholeFileMax        = "whole-file-max"
	FlagBlockSize           = "block-size"
	FlagReadahead           = "readahead"
	FlagReadaheadFiles      = "readahead-files"
	FlagListingCacheEntries = "listing-cache-entries"
	// Listing caps (fusefs/listlimit.go): the same names as the caps'
	// in backend, which error messages spell.
	FlagMaxDirEntries    = backend.CapDirEntries
	FlagMaxListingMemory = backend.CapListingMemory
	FlagReadTimeout      = "read-timeout"
	FlagFuseDebug        = "fuse-debug"
	// FlagCredentialsFD names an inherited file descriptor (a pipe) to read
	// S3 credentials from (ReadCredentials) instead of the environment.
	FlagCredentialsFD = "credentials-fd"
	// Cluster scope (pkg/peer).
	FlagCacheScope    = "cache-scope"
	FlagPeers         = "peers"
	FlagPeersFile     = "peers-file"
	FlagPeerListen    = "peer-listen"
	FlagPeerID        = "peer-id"
	FlagPeerTokenFile = "peer-token-file"
	FlagPeerTimeout   = "peer-timeout"
	FlagPeerGroup     = "peer-group"
	// FlagLogFormat is a global flag of cachefs (text or json).
	FlagLogFormat = "log-format"
)

// Egress flags (package egress): the CSI driver's mounts are
// restricted; a mount run by hand is not, unless asked.
const (
	// FlagRestrictEgress makes every connection of the source's backend
	// go through an egress.Dialer, which refuses the node's own, loopback
	// and link-local addresses unless FlagEgressRules names the endpoint.
	FlagRestrictEgress = "restrict-egress"
	// FlagEgressRules are comma-separated network rules (source URLs, as
	// the node plugin's --network-rules) whose endpoints a restricted
	// mount may reach even there; it implies FlagRestrictEgress.
	FlagEgressRules = "egress-rules"
)

// ReadaheadFilesAuto is the --readahead-files value (and default) that
// lets the readahead of whole small files follow the backend's measured
// latency (fusefs.ReadaheadFilesAuto); a number pins the window, 0 turns it
// off.
const ReadaheadFilesAuto = "auto"

// ParseReadaheadFiles parses a --readahead-files value: ReadaheadFilesAuto
// (fusefs.ReadaheadFilesAuto) or a number of files, 0 or more.
func ParseReadaheadFiles(v string) (int, error) {
	if v == ReadaheadFilesAuto {
		return fusefs.ReadaheadFilesAuto, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--%s: %q is neither %q nor a number of files, 0 or more", FlagReadaheadFiles, v, ReadaheadFilesAuto)
	}
	return n, nil
}

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
	// ReadaheadFiles is the --readahead-files value: "" leaves the CLI's
	// default (ReadaheadFilesAuto), "0" turns it off, a number pins it.
	ReadaheadFiles string
	// LogFormat: "" leaves the CLI's default (text); LogFormatJSON for a
	// log that programs read.
	LogFormat string
	// CredentialsFD, when > 0, is the inherited file descriptor the
	// credentials are read from (FlagCredentialsFD): the starter passes the
	// read end of a pipe there (exec.Cmd.ExtraFiles[0] is fd 3). 0 leaves
	// the flag out: credentials from the environment or the standard chain.
	CredentialsFD int
	// CacheScope: "" leaves the default (ScopeNode); ScopeCluster needs
	// Peers or PeersFile, PeerListen and PeerTokenFile (PeerID "" takes PeerListen).
	CacheScope    string
	Peers         string // id=host:port,…
	PeersFile     string // a file of peers the mount reloads (peer.File)
	PeerListen    string
	PeerID        string
	PeerTokenFile string
	// RestrictEgress restricts the mount's connections (FlagRestrictEgress);
	// EgressRules are the comma-separated rules whose endpoints it may
	// reach anyway (FlagEgressRules). Rules are source URLs, which never
	// hold credentials.
	RestrictEgress bool
	EgressRules    string
	PeerGroup      string // "" leaves the mount's default (peer.DatasetGroup of the source ID)
	// MaxDirEntries is the --max-dir-entries value; 0 leaves the mount's
	// default (fusefs.DefaultMaxDirEntries).
	MaxDirEntries int
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
	add(FlagReadaheadFiles, o.ReadaheadFiles)
	add(FlagCacheScope, o.CacheScope)
	add(FlagPeers, o.Peers)
	add(FlagPeersFile, o.PeersFile)
	add(FlagPeerListen, o.PeerListen)
	add(FlagPeerID, o.PeerID)
	add(FlagPeerTokenFile, o.PeerTokenFile)
	add(FlagPeerGroup, o.PeerGroup)
	if o.CredentialsFD > 0 {
		add(FlagCredentialsFD, strconv.Itoa(o.CredentialsFD))
	}
	if o.RestrictEgress {
		args = append(args, "--"+FlagRestrictEgress)
	}
	add(FlagEgressRules, o.EgressRules)
	if o.MaxDirEntries > 0 {
		add(FlagMaxDirEntries, strconv.Itoa(o.MaxDirEntries))
	}
	return args
}
