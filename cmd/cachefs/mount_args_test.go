package main

import (
	"errors"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/units"
)

// TestCommandOptionsParseBack: the command lines that mountapi.CommandOptions
// builds (the CSI driver starts cachefs with them) parse back, with this
// CLI's own flag set, to the same values.
func TestCommandOptionsParseBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts mountapi.CommandOptions
	}{
		{"minimal", mountapi.CommandOptions{Source: "/data/set", Mountpoint: "/mnt/x", CacheDir: "/var/cache/x", CacheSize: 1 << 30}},
		{"everything", mountapi.CommandOptions{
			Source: "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1", Mountpoint: "/mnt/with space",
			CacheDir: "/var/cache/ds", CacheSize: 123456789, Policy: "nr", Manifest: "none", ReadaheadFiles: "16",
			LogFormat: mountapi.LogFormatJSON, CredentialsFD: 3,
			CacheScope: mountapi.ScopeCluster, Peers: "a=10.0.0.1:7070,b=10.0.0.2:7070", PeerListen: "10.0.0.1:7070", PeerID: "a",
			PeerTokenFile:  "/etc/epochfs/peer-token",
			RestrictEgress: true, EgressRules: "s3://bucket?endpoint=http://127.0.0.1:9000,nfs://filer/export",
			MaxDirEntries: 10, PeerMetrics: "per-peer",
		}},
		{"restricted egress without rules", mountapi.CommandOptions{Source: "/d", Mountpoint: "/m", CacheDir: "/c", CacheSize: 1, RestrictEgress: true}},
		{"peers file", mountapi.CommandOptions{Source: "/d", Mountpoint: "/m", CacheDir: "/c", CacheSize: 1,
			CacheScope: mountapi.ScopeCluster, PeersFile: "/var/lib/epochfs/state/node/peers/ds-1.peers", PeerListen: "10.0.0.1:7400", PeerID: "node-a",
			PeerTokenFile: "/etc/epochfs/peer-token/token", PeerGroup: "g-0123456789abcdef01234567"}},
		{"values that look like flags", mountapi.CommandOptions{Source: "/data/--policy", Mountpoint: "/mnt/-x", CacheDir: "--weird", CacheSize: 1, Manifest: "-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.opts.Args()
			root := newRoot()
			cmd, rest, err := root.Find(args)
			if err != nil || cmd.Name() != mountapi.Command {
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
			size := f.Lookup(mountapi.FlagCacheSize).Value.(*units.Size).Bytes()
			readahead := str(mountapi.FlagReadaheadFiles)
			credsFD, err := f.GetInt(mountapi.FlagCredentialsFD)
			if err != nil {
				t.Fatal(err)
			}
			if credsFD < 0 {
				credsFD = 0 // the CLI's "off"
			}
			restrict, err := f.GetBool(mountapi.FlagRestrictEgress)
			if err != nil {
				t.Fatal(err)
			}
			maxEntries, err := f.GetInt(mountapi.FlagMaxDirEntries)
			if err != nil {
				t.Fatal(err)
			}
			if maxEntries == fusefs.DefaultMaxDirEntries {
				maxEntries = 0 // the CLI's default
			}
			got := mountapi.CommandOptions{
				Source: f.Arg(0), Mountpoint: f.Arg(1),
				CacheDir: str(mountapi.FlagCacheDir), CacheSize: size, Policy: str(mountapi.FlagPolicy),
				Manifest: str(mountapi.FlagManifest), ReadaheadFiles: readahead, LogFormat: str(mountapi.FlagLogFormat),
				CredentialsFD: credsFD, CacheScope: str(mountapi.FlagCacheScope), Peers: str(mountapi.FlagPeers), PeersFile: str(mountapi.FlagPeersFile),
				PeerListen: str(mountapi.FlagPeerListen), PeerID: str(mountapi.FlagPeerID), PeerTokenFile: str(mountapi.FlagPeerTokenFile),
				RestrictEgress: restrict, EgressRules: str(mountapi.FlagEgressRules),
				PeerGroup: str(mountapi.FlagPeerGroup), MaxDirEntries: maxEntries, PeerMetrics: str(mountapi.FlagPeerMetrics),
			}
			want := tc.opts
			if want.Policy == "" {
				want.Policy = "nr" // the CLI's defaults
			}
			if want.ReadaheadFiles == "" {
				want.ReadaheadFiles = mountapi.ReadaheadFilesAuto
			}
			if want.CacheScope == "" {
				want.CacheScope = mountapi.ScopeNode
			}
			if want.LogFormat == "" {
				want.LogFormat = "text"
			}
			if want.PeerMetrics == "" {
				want.PeerMetrics = "aggregated"
			}
			if !reflect.DeepEqual(got, want) {
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

// TestMountPeerMetricsFlag: --peer-metrics takes aggregated or per-peer;
// another value is a usage error naming both.
func TestMountPeerMetricsFlag(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"mount", t.TempDir(), t.TempDir(), "--cache-dir", t.TempDir(), "--cache-size", "1MiB", "--peer-metrics", "peer"})
	root.SetErr(io.Discard)
	err := root.Execute()
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != int(exitcode.Usage) || !strings.Contains(err.Error(), `--peer-metrics: peer metrics "peer": want aggregated or per-peer`) {
		t.Fatalf("mount --peer-metrics peer: %v, want a usage error naming aggregated and per-peer", err)
	}
}

// TestCommandOptionsEveryFlag: with every field set, each flag that
// CommandOptions.Args spells is one this CLI's mount command defines, and
// parses to the value given; Extra comes last, as given.
func TestCommandOptionsEveryFlag(t *testing.T) {
	opts := mountapi.CommandOptions{
		Source: "s3://bucket/p?endpoint=http://127.0.0.1:9000&region=us-east-1", Mountpoint: "/mnt/m", CacheDir: "/c", CacheSize: 1 << 30,
		Policy: "nr", Manifest: "/m.manifest", ManifestMaxMemory: 1 << 20, MetricsAddr: "127.0.0.1:9100",
		WholeFileMax: 1 << 20, BlockSize: 1 << 16, Readahead: 3, ListingCacheEntries: 1000, MaxListingMemory: 64 << 20,
		ReadTimeout: 90 * time.Second, PeerTimeout: 2 * time.Second, ReadaheadFiles: "8", LogFormat: mountapi.LogFormatJSON, LogLevel: "warn",
		CredentialsFD: 3, CacheScope: mountapi.ScopeCluster, Peers: "a=127.0.0.1:7070", PeersFile: "/p", PeerListen: "127.0.0.1:7070",
		PeerID: "a", PeerTokenFile: "/t", RestrictEgress: true, EgressRules: "nfs://filer/export", PeerGroup: "g-1",
		MaxDirEntries: 10, FuseDebug: true, CPUProfile: "/cpu.prof", PeerMetrics: "per-peer",
		Takeover: "/c/handover.sock", Supervise: true, MaxRestarts: 4, RecoverFrom: "/h/holder.sock", Extra: []string{"--" + mountapi.FlagAllowOther + "=false"},
	}
	args := opts.Args()
	cmd, rest, err := newRoot().Find(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("ParseFlags(%q): %v", rest, err)
	}
	if args[len(args)-1] != opts.Extra[0] {
		t.Errorf("Extra is not last: %q", args)
	}
	seen := map[string]bool{}
	for i := 3; i < len(args)-1; i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Fatalf("args[%d] = %q: not a flag", i, args[i])
		}
		fl := cmd.Flags().Lookup(name)
		if fl == nil {
			t.Fatalf("--%s: no such flag of %s", name, mountapi.Command)
		}
		seen[name] = true
		want := "true"
		if fl.Value.Type() != "bool" {
			i++
			want = args[i]
		}
		got := fl.Value.String()
		if sz, ok := fl.Value.(*units.Size); ok { // it prints its value in the grammar's units
			got = strconv.FormatInt(sz.Bytes(), 10)
		}
		if got != want {
			t.Errorf("--%s parsed to %q, want %q", name, got, want)
		}
	}
	// Every field but the positional ones and Extra spells one flag.
	if want := reflect.TypeFor[mountapi.CommandOptions]().NumField() - 3; len(seen) != want {
		t.Errorf("%d flags spelled, want one for each of %d fields: %q", len(seen), want, args)
	}
}
