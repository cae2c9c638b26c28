package mountapi

import (
	"strconv"
	"time"
)

// CommandOptions is one `cachefs mount` command line, as another program
// (the CSI node plugin, a benchmark, a test) starts it. It is a value; Args
// builds the arguments. Zero optional fields are left out, so the CLI's
// defaults apply.
type CommandOptions struct {
	Source     string // dataset URL; required
	Mountpoint string // required
	CacheDir   string // required
	CacheSize  int64  // bytes; required
	Policy     string // "" leaves the CLI's default (nr)
	Manifest   string // "" leaves the default (ManifestAuto)
	// ManifestMaxMemory in bytes; 0 leaves the mount's default.
	ManifestMaxMemory int64
	// MetricsAddr serves /metrics at HOST:PORT; "" leaves it off.
	MetricsAddr string
	// WholeFileMax and BlockSize in bytes, Readahead in blocks,
	// ListingCacheEntries in entries, MaxListingMemory in bytes; 0 leaves
	// the mount's default.
	WholeFileMax        int64
	BlockSize           int64
	Readahead           int
	ListingCacheEntries int
	MaxListingMemory    int64
	// ReadTimeout and PeerTimeout: 0 leaves the mount's default.
	ReadTimeout time.Duration
	PeerTimeout time.Duration
	// ReadaheadFiles is the --readahead-files value: "" leaves the CLI's
	// default (ReadaheadFilesAuto), "0" turns it off, a number pins it.
	ReadaheadFiles string
	// LogFormat: "" leaves the CLI's default (text); LogFormatJSON for a
	// log that programs read.
	LogFormat string
	// LogLevel: "" leaves the CLI's default (info).
	LogLevel string
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
	// PeerMetrics is the --peer-metrics value: "" leaves the default
	// (aggregated over the peers), "per-peer" labels them by peer id.
	PeerMetrics string
	// MaxDirEntries is the --max-dir-entries value; 0 leaves the mount's
	// default (fusefs.DefaultMaxDirEntries).
	MaxDirEntries int
	// FuseDebug logs every FUSE request; CPUProfile writes a CPU profile
	// of the mount to that file (benchmarks).
	FuseDebug  bool
	CPUProfile string
	// Takeover is the handover socket of a running mount whose connection
	// this one takes over (FlagTakeover); "" mounts.
	Takeover string
	// Supervise runs the mount under a holder that recovers it when its
	// process dies (FlagSupervise); MaxRestarts (FlagMaxRestarts) bounds
	// that, 0 leaving the default.
	Supervise   bool
	MaxRestarts int
	// RecoverFrom is a holder's socket whose connection the mount serves
	// instead of mounting (FlagRecoverFrom; with Supervise).
	RecoverFrom string
	// Extra are more arguments, appended as given: a benchmark's
	// user-supplied flags under comparison.
	Extra []string
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
	num := func(flag string, n int64) {
		if n > 0 {
			add(flag, strconv.FormatInt(n, 10))
		}
	}
	dur := func(flag string, d time.Duration) {
		if d > 0 {
			add(flag, d.String())
		}
	}
	boolean := func(flag string, on bool) {
		if on {
			args = append(args, "--"+flag)
		}
	}
	add(FlagPolicy, o.Policy)
	add(FlagLogFormat, o.LogFormat)
	add(FlagLogLevel, o.LogLevel)
	add(FlagManifest, o.Manifest)
	num(FlagManifestMaxMemory, o.ManifestMaxMemory)
	add(FlagMetricsAddr, o.MetricsAddr)
	num(FlagWholeFileMax, o.WholeFileMax)
	num(FlagBlockSize, o.BlockSize)
	num(FlagReadahead, int64(o.Readahead))
	add(FlagReadaheadFiles, o.ReadaheadFiles)
	num(FlagListingCacheEntries, int64(o.ListingCacheEntries))
	num(FlagMaxListingMemory, o.MaxListingMemory)
	dur(FlagReadTimeout, o.ReadTimeout)
	add(FlagCacheScope, o.CacheScope)
	add(FlagPeers, o.Peers)
	add(FlagPeersFile, o.PeersFile)
	add(FlagPeerListen, o.PeerListen)
	add(FlagPeerID, o.PeerID)
	add(FlagPeerTokenFile, o.PeerTokenFile)
	add(FlagPeerGroup, o.PeerGroup)
	dur(FlagPeerTimeout, o.PeerTimeout)
	add(FlagPeerMetrics, o.PeerMetrics)
	num(FlagCredentialsFD, int64(o.CredentialsFD))
	boolean(FlagRestrictEgress, o.RestrictEgress)
	add(FlagEgressRules, o.EgressRules)
	num(FlagMaxDirEntries, int64(o.MaxDirEntries))
	boolean(FlagFuseDebug, o.FuseDebug)
	add(FlagCPUProfile, o.CPUProfile)
	add(FlagTakeover, o.Takeover)
	boolean(FlagSupervise, o.Supervise)
	num(FlagMaxRestarts, int64(o.MaxRestarts))
	add(FlagRecoverFrom, o.RecoverFrom)
	return append(args, o.Extra...)
}
