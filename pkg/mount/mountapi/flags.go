package mountapi

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
	// in pkg/backend (backend.CapDirEntries, backend.CapListingMemory),
	// which error messages spell; pkg/mount's tests hold them equal.
	FlagMaxDirEntries    = "max-dir-entries"
	FlagMaxListingMemory = "max-listing-memory"
	FlagReadTimeout      = "read-timeout"
	FlagFuseDebug        = "fuse-debug"
	// FlagTakeover names the handover socket (HandoverSocket) of a running
	// mount of the same dataset and mount point, whose FUSE connection the
	// new mount takes over instead of mounting (pkg/handover).
	FlagTakeover = "takeover"
	// FlagSupervise runs the mount under a holder of its descriptor that
	// restarts it on the same connection when it dies (mount.Supervise);
	// FlagMaxRestarts bounds that. FlagRecoverFD is what the holder passes
	// the restarted process: descriptor N is the connection, N+1 a pipe
	// with its state (handover.WriteState).
	FlagSupervise   = "supervise"
	FlagMaxRestarts = "max-restarts"
	FlagRecoverFD   = "recover-fd"
	// FlagRecoverFrom names a holder's socket (handover.ServeHeld: the CSI
	// node plugin's) whose held connection a supervised mount recovers
	// instead of mounting: the holder's own mount process is gone.
	FlagRecoverFrom = "recover-from"
	// FlagNoPassthrough serves cached files through the process instead of
	// kernel passthrough.
	FlagNoPassthrough = "no-passthrough"
	// FlagCPUProfile writes a CPU profile of the whole mount (benchmarks).
	FlagCPUProfile = "cpu-profile"
	// FlagCredentialsFD names an inherited file descriptor (a pipe) to read
	// credentials from (ReadCredentials) instead of the environment.
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
	FlagPeerMetrics   = "peer-metrics" // aggregated (default) or per-peer (peer.MetricsPerPeer)
	// FlagLogFormat (text or json) and FlagLogLevel (debug, info, warn,
	// error) are global flags of cachefs.
	FlagLogFormat = "log-format"
	FlagLogLevel  = "log-level"
)

// Egress flags (package egress): the CSI driver's mounts are restricted; a
// mount run by hand is not, unless asked.
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

// Values of the flags above besides numbers, sizes and paths.
const (
	// ReadaheadFilesAuto is the --readahead-files value (and default) that
	// lets the readahead of whole small files follow the backend's
	// measured latency; a number pins the window, 0 turns it off.
	ReadaheadFilesAuto = "auto"
	// LogFormatJSON is the FlagLogFormat value that makes every log line,
	// the failure line included (see package exitcode), one JSON object.
	LogFormatJSON = "json"
	// ManifestAuto (the default) looks for the manifest at
	// SOURCE/.epochfs/manifest and mounts without one when it is missing;
	// ManifestNone mounts without a manifest (lazy backend listings).
	ManifestAuto = ""
	ManifestNone = "none"
	// Cache scopes (FlagCacheScope).
	ScopeNode    = "node"    // the default: a node-local cache
	ScopeCluster = "cluster" // the dataset's cache peers split its files (pkg/peer)
)
