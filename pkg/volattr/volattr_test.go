package volattr

import (
	"errors"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]string
		want Params
		err  string
	}{
		{name: "defaults", in: map[string]string{Source: "/data"}, want: Params{Source: "/data", CacheSize: 1 << 30, Policy: "nr"}},
		{name: "all", in: map[string]string{Source: "s3://bucket/p", CacheSize: "2Gi", Manifest: "/m.efm", Policy: "nr", Prefetch: "true", ReadaheadFiles: "256",
			"csi.storage.k8s.io/pod.name": "x"},
			want: Params{Source: "s3://bucket/p", CacheSize: 2 << 30, Manifest: "/m.efm", Policy: "nr", Prefetch: true, ReadaheadFiles: ptr(256)}},
		{name: "claim and pv names", in: map[string]string{Source: "/d", ClaimName: "imagenet", ClaimNamespace: "team-a", PVName: "pv-imagenet", PodName: "p", PodNamespace: "team-a"},
			want: Params{Source: "/d", CacheSize: 1 << 30, Policy: "nr"}},
		{name: "readahead auto", in: map[string]string{Source: "/d", ReadaheadFiles: "auto"}, want: Params{Source: "/d", CacheSize: 1 << 30, Policy: "nr"}},
		{name: "readahead off", in: map[string]string{Source: "/d", ReadaheadFiles: "0"}, want: Params{Source: "/d", CacheSize: 1 << 30, Policy: "nr", ReadaheadFiles: ptr(0)}},
		{name: "scope node", in: map[string]string{Source: "/d", CacheScope: "node"}, want: Params{Source: "/d", CacheSize: 1 << 30, Policy: "nr"}},
		{name: "scope cluster", in: map[string]string{Source: "/d", CacheScope: "cluster"}, want: Params{Source: "/d", CacheSize: 1 << 30, Policy: "nr", CacheScope: "cluster"}},
		{name: "scope bad", in: map[string]string{Source: "/d", CacheScope: "Cluster"}, err: `parameter "cacheScope": "Cluster" is neither "node" nor "cluster"`},
		{name: "no source", in: map[string]string{}, err: `parameter "source" is required (the dataset URL, e.g. s3://bucket/prefix or /mnt/nfs/dataset)`},
		{name: "bad size", in: map[string]string{Source: "/d", CacheSize: "0"}, err: `parameter "cacheSize": invalid size "0": must be greater than zero`},
		{name: "readahead over", in: map[string]string{Source: "/d", ReadaheadFiles: "257"}, err: `parameter "readaheadFiles": "257" is neither "auto" nor a number of files from 0 to 256`},
		{name: "readahead negative", in: map[string]string{Source: "/d", ReadaheadFiles: "-1"}, err: `parameter "readaheadFiles": "-1" is neither "auto" nor a number of files from 0 to 256`},
		{name: "readahead Auto", in: map[string]string{Source: "/d", ReadaheadFiles: "Auto"}, err: `parameter "readaheadFiles": "Auto" is neither "auto" nor a number of files from 0 to 256`},
		{name: "policy", in: map[string]string{Source: "/d", Policy: "mru"}, err: `parameter "policy": "mru" is not a cache policy of EpochFS (the only one is "nr")`},
		{name: "benchmark policy", in: map[string]string{Source: "/d", Policy: "lru"}, err: `parameter "policy": "lru" is not a cache policy of EpochFS (the only one is "nr")`},
		{name: "relative manifest", in: map[string]string{Source: "/d", Manifest: "m.efm"}, err: `parameter "manifest": "m.efm" must be an absolute path or a URL`},
		{name: "prefetch", in: map[string]string{Source: "/d", Prefetch: "yes"}, err: `parameter "prefetch": "yes" is not true or false`},
		{name: "unknown", in: map[string]string{Source: "/d", "cachesize": "1G", "zz": ""},
			err: `unknown parameters ["cachesize" "zz"] (known: source, cacheSize, manifest, policy, prefetch, readaheadFiles, cacheScope)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in, 1<<30)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse = %+v, %v; want error %q wrapping ErrInvalid", got, err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, tt.want)
			}
			back, err := Parse(got.Attributes(), 1)
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("Parse(Attributes()) = %+v, %v; want %+v", back, err, got)
			}
		})
	}
}

func ptr(n int) *int { return &n }
