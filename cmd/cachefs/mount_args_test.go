package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/units"
)

// TestCommandOptionsParseBack: the command lines that mount.CommandOptions
// builds (the CSI driver starts cachefs with them) parse back, with this
// CLI's own flag set, to the same values.
func TestCommandOptionsParseBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts mount.CommandOptions
	}{
		{"minimal", mount.CommandOptions{Source: "/data/set", Mountpoint: "/mnt/x", CacheDir: "/var/cache/x", CacheSize: 1 << 30}},
		{"everything", mount.CommandOptions{
			Source: "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1", Mountpoint: "/mnt/with space",
			CacheDir: "/var/cache/ds", CacheSize: 123456789, Policy: "nr", Manifest: "none", ReadaheadFiles: "16",
			LogFormat: mount.LogFormatJSON, CredentialsFD: 3,
			CacheScope: mount.ScopeCluster, Peers: "a=10.0.0.1:7070,b=10.0.0.2:7070", PeerListen: "10.0.0.1:7070", PeerID: "a",
			PeerTokenFile:  "/etc/epochfs/peer-token",
			RestrictEgress: true, EgressRules: "s3://bucket?endpoint=http://127.0.0.1:9000,nfs://filer/export",
			MaxDirEntries: 10,
		}},
		{"restricted egress without rules", mount.CommandOptions{Source: "/d", Mountpoint: "/m", CacheDir: "/c", CacheSize: 1, RestrictEgress: true}},
		{"peers file", mount.CommandOptions{Source: "/d", Mountpoint: "/m", CacheDir: "/c", CacheSize: 1,
			CacheScope: mount.ScopeCluster, PeersFile: "/var/lib/epochfs/state/node/peers/ds-1.peers", PeerListen: "10.0.0.1:7400", PeerID: "node-a",
			PeerTokenFile: "/etc/epochfs/peer-token/token", PeerGroup: "g-0123456789abcdef01234567"}},
		{"values that look like flags", mount.CommandOptions{Source: "/data/--policy", Mountpoint: "/mnt/-x", CacheDir: "--weird", CacheSize: 1, Manifest: "-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.opts.Args()
			root := newRoot()
			cmd, rest, err := root.Find(args)
			if err != nil || cmd.Name() != mount.Command {
				t.Fatalf("Find(%q) = %v, %v; want the mount command", args, cmd.Name(), err)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatalf("ParseFlags(%q): %v", rest, err)
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Fatalf("args of %q: %v", rest, err)
			}
			if err := cmd.ValidateRequiredFlags(); err != nil {
				t.Fatalf("%q: %v", rest, err)
			}
			f := cmd.Flags()
			str := func(name string) string {
				t.Helper()
				v, err := f.GetString(name)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			size, err := units.ParseSize(str(mount.FlagCacheSize))
			if err != nil {
				t.Fatal(err)
			}
			readahead := str(mount.FlagReadaheadFiles)
			credsFD, err := f.GetInt(mount.FlagCredentialsFD)
			if err != nil {
				t.Fatal(err)
			}
			if credsFD < 0 {
				credsFD = 0 // the CLI's "off"
			}
			restrict, err := f.GetBool(mount.FlagRestrictEgress)
			if err != nil {
				t.Fatal(err)
			}
			maxEntries, err := f.GetInt(mount.FlagMaxDirEntries)
			if err != nil {
				t.Fatal(err)
			}
			if maxEntries == fusefs.DefaultMaxDirEntries {
				maxEntries = 0 // the CLI's default
			}
			got := mount.CommandOptions{
				Source: f.Arg(0), Mountpoint: f.Arg(1),
				CacheDir: str(mount.FlagCacheDir), CacheSize: size, Policy: str(mount.FlagPolicy),
				Manifest: str(mount.FlagManifest), ReadaheadFiles: readahead, LogFormat: str(mount.FlagLogFormat),
				CredentialsFD: credsFD, CacheScope: str(mount.FlagCacheScope), Peers: str(mount.FlagPeers), PeersFile: str(mount.FlagPeersFile),
				PeerListen: str(mount.FlagPeerListen), PeerID: str(mount.FlagPeerID), PeerTokenFile: str(mount.FlagPeerTokenFile),
				RestrictEgress: restrict, EgressRules: str(mount.FlagEgressRules),
				PeerGroup: str(mount.FlagPeerGroup), MaxDirEntries: maxEntries,
			}
			want := tc.opts
			if want.Policy == "" {
				want.Policy = "nr" // the CLI's defaults
			}
			if want.ReadaheadFiles == "" {
				want.ReadaheadFiles = mount.ReadaheadFilesAuto
			}
			if want.CacheScope == "" {
				want.CacheScope = mount.ScopeNode
			}
			if want.LogFormat == "" {
				want.LogFormat = "text"
			}
			if got != want {
				t.Errorf("parsed back\n  %+v\nwant\n  %+v\nargs %q", got, want, args)
			}
			if !slices.Equal(f.Args(), []string{tc.opts.Source, tc.opts.Mountpoint}) {
				t.Errorf("positional args %q", f.Args())
			}
		})
	}
}

// TestMountPolicyOnlyNR: `cachefs mount --policy` accepts nr only; another
// name (the benchmarks' policies included) is a usage error naming nr.
func TestMountPolicyOnlyNR(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"mount", t.TempDir(), t.TempDir(), "--cache-dir", t.TempDir(), "--cache-size", "1MiB", "--policy", "lru"})
	root.SetErr(io.Discard)
	err := root.Execute()
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != int(exitcode.Usage) || !strings.Contains(err.Error(), `--policy "lru": the only cache policy is "nr"`) {
		t.Fatalf("mount --policy lru: %v, want a usage error naming nr", err)
	}
}
