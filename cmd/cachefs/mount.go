package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/units"
)

func newMountCmd(g *globalFlags) *cobra.Command {
	var mf mountFlags
	cmd := &cobra.Command{
		Use:   mountapi.Command + " SOURCE MOUNTPOINT --cache-dir DIR --cache-size SIZE",
		Short: "Mount a dataset read-only through the cache, in the foreground",
		Long: `Mount SOURCE read-only at MOUNTPOINT through the node-local cache and serve
until SIGINT/SIGTERM or an outside unmount, then unmount cleanly.
` + exitCodesHelp + `

SOURCE is one of:
  /abs/path or file:///abs/path    a local or kernel-mounted directory
  s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1
                                   S3; credentials from --credentials-fd, else
                                   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
                                   AWS_SESSION_TOKEN, the shared credentials
                                   file, or IAM
  cephfs://[user@]mon[:port]/path?fs=NAME
                                   CephFS through libcephfs (only in builds
                                   made with 'make build-ceph', as in the
                                   image); key from --credentials-fd, else the
                                   keyring of CEPH_CONF / CEPH_KEYRING
  nfs://host[:port]/export/path?uid=N&gid=N
                                   NFSv3 without a kernel NFS client (options:
                                   uid, gid, mountport, conns, rsize)
  mirror:URL1,URL2[,...]           the same dataset in several places

--credentials-fd N reads KEY=VALUE lines (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN for S3; userID and userKey
for CephFS; at most 16 KiB) from the inherited file descriptor N until EOF,
typically a pipe, and uses them instead of the environment's: they never
appear in /proc/PID/environ or argv.

Mounting needs root (or fuse3's fusermount3 on the PATH).`,
		Example: `  cachefs mount /data/imagenet /mnt/imagenet --cache-dir /var/cache/epochfs --cache-size 50GiB
  cachefs mount 's3://datasets/imagenet?endpoint=http://127.0.0.1:9000' /mnt/imagenet \
      --cache-dir /var/cache/epochfs --cache-size 100GiB --metrics-addr 127.0.0.1:9567`,
		// Cobra's own checks (arguments, required flags) run here so that
		// they too exit with exitcode.Usage and a failure line.
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(2)(cmd, args); err != nil {
				return g.mountFailed(usageError(err))
			}
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return g.mountFailed(usageError(err))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := mf.complete(cmd); err != nil {
				return g.mountFailed(err)
			}
			if err := mf.sv.complete(cmd, &mf.cfg); err != nil {
				return g.mountFailed(err)
			}
			if mf.sv.on {
				mf.cfg.Source, mf.cfg.Mountpoint = args[0], args[1]
				return runSupervised(cmd.Context(), g, mf.cfg, mf.sv)
			}
			return g.mountFailed(runMount(cmd.Context(), g, mf.cfg, args, mf.cacheSize, mf.wholeFileMax, mf.blockSize, mf.readaheadFiles, mf.cpuProfile))
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return g.mountFailed(usageError(err)) })
	mf.register(cmd.Flags())
	_ = cmd.MarkFlagRequired(mountapi.FlagCacheDir)
	_ = cmd.MarkFlagRequired(mountapi.FlagCacheSize)
	return cmd
}

// mountFlags are the flags of `cachefs mount`: cfg takes the values that
// need no parsing, the other fields the rest until complete.
type mountFlags struct {
	cfg            mount.Config
	cacheSize      units.Size
	policy         string
	wholeFileMax   units.Size
	blockSize      units.Size
	readaheadFiles string
	cpuProfile     string
	manifestMax    units.Size
	credsFD        int
	peers          string
	peersFile      string
	maxListingMem  units.Size
	restrictEgress bool
	egressRules    string
	peerMetrics    string
	sv             superviseFlags
}

// complete parses the flags that need it into cfg; errors are usage
// errors, but for the credentials fd's.
func (mf *mountFlags) complete(cmd *cobra.Command) error {
	if mf.policy != cache.PolicyNR {
		return usageError(fmt.Errorf("--%s %q: the only cache policy is %q", mountapi.FlagPolicy, mf.policy, cache.PolicyNR))
	}
	mf.cfg.ManifestMaxMemory, mf.cfg.MaxListingMemory = mf.manifestMax.Bytes(), mf.maxListingMem.Bytes()
	if mf.cfg.MaxDirEntries <= 0 {
		return usageError(fmt.Errorf("--%s: %d must be at least 1", mountapi.FlagMaxDirEntries, mf.cfg.MaxDirEntries))
	}
	if cmd.Flags().Changed(mountapi.FlagCredentialsFD) {
		creds, err := mountapi.ReadCredentialsFD(mf.credsFD)
		if err != nil {
			return err
		}
		mf.cfg.Backend.Credentials = backend.Credentials(creds)
	}
	if mf.restrictEgress || mf.egressRules != "" {
		d, err := mount.NewEgress(mount.SplitRules(mf.egressRules))
		if err != nil {
			return usageError(err)
		}
		mf.cfg.Backend.Egress = d
	}
	if mf.peers != "" {
		list, err := peer.ParsePeers(mf.peers)
		if err != nil {
			return usageError(fmt.Errorf("--%s: %w", mountapi.FlagPeers, err))
		}
		mf.cfg.Peer.Peers = list
	}
	if mf.peersFile != "" {
		if mf.peers != "" {
			return usageError(fmt.Errorf("--%s and --%s: give one", mountapi.FlagPeers, mountapi.FlagPeersFile))
		}
		if mf.cfg.Peer.Scope != mountapi.ScopeCluster {
			return usageError(fmt.Errorf("--%s needs --%s %s", mountapi.FlagPeersFile, mountapi.FlagCacheScope, mountapi.ScopeCluster))
		}
		fm, err := peer.OpenFile(cmd.Context(), mf.peersFile, 0)
		if err != nil {
			return usageError(fmt.Errorf("--%s: %w", mountapi.FlagPeersFile, err))
		}
		mf.cfg.Peer.Membership = fm
	}
	perPeer, err := peer.ParseMetricsMode(mf.peerMetrics)
	if err != nil {
		return usageError(fmt.Errorf("--%s: %w", mountapi.FlagPeerMetrics, err))
	}
	mf.cfg.Peer.PerPeerMetrics = perPeer
	return nil
}

// register defines the flags on f.
func (mf *mountFlags) register(f *pflag.FlagSet) {
	f.StringVar(&mf.cfg.CacheDir, mountapi.FlagCacheDir, "", "cache directory (created if missing; one mount process per directory) (required)")
	// Sizes are units.Size flag values: a bad one is a flag error (exit 2)
	// with the grammar's message.
	mf.manifestMax, mf.wholeFileMax, mf.blockSize = units.Size(manifest.DefaultMaxMemory), units.Size(fusefs.DefaultWholeFileMax), units.Size(fusefs.DefaultBlockSize)
	mf.maxListingMem = units.Size(fusefs.DefaultMaxListingMemory)
	f.Var(&mf.cacheSize, mountapi.FlagCacheSize, "cache capacity, e.g. 50GiB, 500MB, 1073741824 (required)")
	f.StringVar(&mf.policy, mountapi.FlagPolicy, cache.PolicyNR, "cache policy: nr (no replacement), the only one")
	f.StringVar(&mf.cfg.Manifest, mountapi.FlagManifest, "", "dataset manifest (from 'cachefs index'): a local file or a URL of the manifest object; default: SOURCE/.epochfs/manifest when it exists; 'none' lists the backend instead")
	f.Var(&mf.manifestMax, mountapi.FlagManifestMaxMemory, "the most memory the manifest may take, estimated from its header before it is decompressed (about 30-40 B per file, +32 with checksums); a larger manifest fails the mount")
	f.StringVar(&mf.cfg.MetricsAddr, mountapi.FlagMetricsAddr, "", "serve Prometheus metrics at HOST:PORT/metrics (off when empty)")
	f.BoolVar(&mf.cfg.AllowOther, mountapi.FlagAllowOther, true, "let every user read the mount (needs root or user_allow_other in /etc/fuse.conf)")
	f.Var(&mf.wholeFileMax, mountapi.FlagWholeFileMax, "files up to this size are fetched and cached whole on first open")
	f.Var(&mf.blockSize, mountapi.FlagBlockSize, "larger files are fetched and cached in blocks of this size")
	f.IntVar(&mf.cfg.Readahead, mountapi.FlagReadahead, fusefs.DefaultReadahead, "blocks fetched ahead of a sequential reader of a large file")
	f.StringVar(&mf.readaheadFiles, mountapi.FlagReadaheadFiles, mountapi.ReadaheadFilesAuto, "when an open of a small file misses, fetch this many of the next files of its directory into the cache in the background: 'auto' follows the backend's measured latency (on for a far store, off for a local one), a number pins it (0: off); raises a cold epoch's backend concurrency above the loader's workers")
	f.StringVar(&mf.cpuProfile, mountapi.FlagCPUProfile, "", "write a CPU profile (runtime/pprof) of the whole mount to this file, for benchmarks")
	_ = f.MarkHidden(mountapi.FlagCPUProfile)
	f.IntVar(&mf.cfg.ListingCacheEntries, mountapi.FlagListingCacheEntries, fusefs.DefaultListingCacheEntries, "without a manifest: directory entries kept from listings (~150 B each); least recently used directories are listed again when needed")
	f.IntVar(&mf.cfg.MaxDirEntries, mountapi.FlagMaxDirEntries, fusefs.DefaultMaxDirEntries, "without a manifest: most entries of one directory; a larger directory reads as EFBIG (\"File too large\"), with an error line in the log naming it, and the rest of the mount serves on (a listing also stops after this/100 + 100 requests)")
	f.Var(&mf.maxListingMem, mountapi.FlagMaxListingMemory, "without a manifest: most memory of the listings the mount holds and fetches, together; the least recently used are dropped to make room, and a listing that still does not fit reads as EFBIG")
	f.DurationVar(&mf.cfg.ReadTimeout, mountapi.FlagReadTimeout, fusefs.DefaultReadTimeout, "deadline of one backend fetch, retries included; then the read fails with EIO")
	f.IntVar(&mf.credsFD, mountapi.FlagCredentialsFD, -1, "read S3 credentials (KEY=VALUE lines: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) from this inherited file descriptor, e.g. a pipe, instead of the environment")
	f.StringVar(&mf.cfg.Peer.Scope, mountapi.FlagCacheScope, mountapi.ScopeNode, "node: a node-local cache; cluster: the cache peers of the dataset (--peers) split its files, each cached by its owner only, and a miss of another peer's file asks that owner before the backend")
	f.StringVar(&mf.peers, mountapi.FlagPeers, "", "cluster scope: the cache peers, id=host:port[;capacity=BYTES],... (this mount included, or it is added as --peer-id=--peer-listen); with a manifest, capacities make ownership byte-balanced")
	f.StringVar(&mf.peersFile, mountapi.FlagPeersFile, "", "cluster scope: instead of --peers, a file with the cache peers (id=host:port[;capacity=BYTES], one a line; this mount included) that another program rewrites and the mount reloads when it changes: the CSI node plugin keeps it from Kubernetes discovery")
	f.StringVar(&mf.cfg.Peer.Listen, mountapi.FlagPeerListen, "", "cluster scope: serve peers at HOST:PORT (a host is required: 0.0.0.0 only when written out)")
	f.StringVar(&mf.cfg.Peer.ID, mountapi.FlagPeerID, "", "cluster scope: this mount's peer id (default: the --peer-listen address)")
	f.StringVar(&mf.cfg.Peer.TokenFile, mountapi.FlagPeerTokenFile, "", "cluster scope: file holding the token shared by the peers (at least 16 bytes; peers without it are refused)")
	f.StringVar(&mf.cfg.Peer.Group, mountapi.FlagPeerGroup, "", "cluster scope: this mount's peer group: requests carry it with its key (an HMAC of the token and the group) and the peer server serves this group only (default: derived from the source ID, so every mount of one source is one group; the CSI driver passes one that includes the volume's credentials)")
	f.DurationVar(&mf.cfg.Peer.Timeout, mountapi.FlagPeerTimeout, peer.DefaultTimeout, "cluster scope: deadline of one request to a peer; then the read goes to the backend")
	f.StringVar(&mf.peerMetrics, mountapi.FlagPeerMetrics, peer.MetricsAggregated, "cluster scope: peer series summed over the peers ("+peer.MetricsAggregated+") or labelled with each peer's id ("+peer.MetricsPerPeer+": a series per peer per counter, for debugging a small cluster)")
	f.BoolVar(&mf.restrictEgress, mountapi.FlagRestrictEgress, false, "refuse connections of the source (and a manifest URL) to loopback, link-local (169.254.0.0/16 with the cloud metadata address, fe80::/10), unspecified and multicast addresses and this node's own, judged on the resolved IP that is dialed, unless --"+mountapi.FlagEgressRules+" names the endpoint; the CSI driver sets it on every mount it starts (off: a mount run by hand is the admin's)")
	f.StringVar(&mf.egressRules, mountapi.FlagEgressRules, "", "comma-separated network rules (s3://bucket?endpoint=URL, nfs://host/export, cephfs://mon/path, as the driver's --network-rules) whose endpoints a restricted mount may reach anyway; implies --"+mountapi.FlagRestrictEgress)
	f.BoolVar(&mf.cfg.Debug, mountapi.FlagFuseDebug, false, "log every FUSE request (very verbose)")
	mf.sv.register(f)
	f.StringVar(&mf.cfg.Takeover, mountapi.FlagTakeover, "", "take over the FUSE connection of the running mount of this dataset on this mount point, through its handover socket (CACHE_DIR/"+mountapi.HandoverSocketName+"), instead of mounting: it holds back new requests, finishes those in flight, hands over and exits; readers see a stall, not an error (an upgrade in place)")
}

// exitCodesHelp documents the exit codes, from package exitcode (also in
// docs/CSI.md).
var exitCodesHelp = func() string {
	var b strings.Builder
	b.WriteString(`
When it fails, the last line it logs is "mount failed" with exitCode, reason
and error (one JSON object with --log-format json; on a terminal without
--log-format json, one plain line instead: cachefs: mount: MESSAGE), and it
exits with:`)
	for _, c := range exitcode.Codes() {
		if c != exitcode.OK {
			fmt.Fprintf(&b, "\n  %d %-18s %s", int(c), c.Reason(), c.Summary())
		}
	}
	return b.String()
}()

func runMount(ctx context.Context, g *globalFlags, cfg mount.Config, args []string, cacheSize, wholeFileMax, blockSize units.Size, readaheadFiles, cpuProfile string) error {
	log, err := g.logger()
	if err != nil {
		return usageError(err)
	}
	cfg.Source, cfg.Mountpoint, cfg.Logger, cfg.Version = args[0], args[1], log, version
	cfg.CacheSize, cfg.WholeFileMax, cfg.BlockSize = cacheSize.Bytes(), wholeFileMax.Bytes(), blockSize.Bytes()
	if cfg.ReadaheadFiles, err = mount.ParseReadaheadFiles(readaheadFiles); err != nil {
		return usageError(err)
	}
	m, err := mount.New(cfg)
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return usageError(fmt.Errorf("--cpu-profile: %w", err))
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return usageError(fmt.Errorf("--cpu-profile: %w", err))
		}
		defer pprof.StopCPUProfile()
	}
	return m.Run(ctx)
}

// usageError marks a command-line error as mount.ErrInvalidConfig (exit
// code 2), keeping its message.
func usageError(err error) error { return &invalidUsage{err} }

type invalidUsage struct{ err error }

func (e *invalidUsage) Error() string   { return e.err.Error() }
func (e *invalidUsage) Unwrap() []error { return []error{e.err, mount.ErrInvalidConfig} }

// mountFailed turns an error of `cachefs mount` into its exit code and
// writes the failure line (package exitcode) as the last log line; main
// then only exits. nil stays nil. On a terminal, without --log-format
// json, the failure is one plain line for people instead: `cachefs:
// mount: MESSAGE` (the CSI driver, which reads the failure line back,
// logs to a file in json).
func (g *globalFlags) mountFailed(err error) error {
	if err == nil {
		return nil
	}
	code := mount.ExitCode(err)
	if w := g.errOut(); isTerminal(w) && !strings.EqualFold(g.logFormat, mountapi.LogFormatJSON) {
		fmt.Fprintf(w, "cachefs: mount: %s\n", strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
		return &exitError{code: int(code), err: err, reported: true}
	}
	log, lerr := g.logger()
	if lerr != nil { // a bad --log-format or --log-level: report in text
		log = slog.New(slog.NewTextHandler(g.errOut(), nil))
	}
	exitcode.LogFailure(log, code, err)
	return &exitError{code: int(code), err: err, reported: true}
}
