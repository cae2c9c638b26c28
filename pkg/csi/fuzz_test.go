package csi

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/volattr"
)

// FuzzRequestValidation feeds hostile volume ids, paths and parameters to
// the validators of every CSI call: no panic, and whatever passes is safe to
// use as a file name or mount path.
func FuzzRequestValidation(f *testing.F) {
	for _, seed := range [][3]string{
		{"vol-1", "/var/lib/kubelet/pods/x/volumes/v", "s3://bucket/prefix?endpoint=http://127.0.0.1:9000"},
		{"../../etc", "relative/path", "/data"},
		{".hidden", "/a/../b", "s3:///x"},
		{"a/b", "/a//b", "file:///data"},
		{strings.Repeat("x", 200), "/\x00", "nfs://host/export"},
		{"", "", "mirror:/a,/b"},
	} {
		f.Add(seed[0], seed[1], seed[2], "10Gi", "nr")
	}
	f.Fuzz(func(t *testing.T, id, path, source, size, policy string) {
		if checkVolumeID(id) == nil {
			if id == "" || len(id) > maxIDLen || strings.ContainsAny(id, "/\x00") || id[0] == '.' || filepath.Base(id) != id {
				t.Fatalf("accepted volume id %q", id)
			}
		}
		if checkPath("p", path) == nil {
			if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.Contains(path, "..") && strings.Contains("/"+path+"/", "/../") || strings.ContainsRune(path, 0) {
				t.Fatalf("accepted path %q", path)
			}
		}
		p, err := parseParams(map[string]string{volattr.Source: source, volattr.CacheSize: size, volattr.Policy: policy}, 1<<30)
		if err == nil {
			if p.Source == "" || p.CacheSize <= 0 {
				t.Fatalf("accepted %+v", p)
			}
			if k := datasetKey(p, ""); filepath.Base(k) != k || strings.ContainsAny(k, "/\x00") {
				t.Fatalf("dataset key %q is not a safe file name", k)
			}
		}
	})
}

// TestDatasetKeyStable: the dataset key of a volume without readaheadFiles
// is what it was before that parameter existed (the state directory and
// the cache directory are named by it, so a driver upgrade must not move
// them); with it, the key differs.
func TestDatasetKeyStable(t *testing.T) {
	p, err := parseParams(map[string]string{"source": "s3://bucket/imagenet?region=us-east-1", "cacheSize": "1Gi"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Computed by the code before readaheadFiles (commit d56d8d5).
	const before = "ds-6463e661a9b597ab008a3df7"
	if k := datasetKey(p, ""); k != before {
		t.Errorf("key %s, want %s as before", k, before)
	}
	n := 8
	p.ReadaheadFiles = &n
	k8 := datasetKey(p, "")
	if k8 == before {
		t.Error("readaheadFiles does not change the dataset key")
	}
	// "0" (off) is not the default (auto) any more: keyed apart from both.
	off := 0
	p.ReadaheadFiles = &off
	if k := datasetKey(p, ""); k == before || k == k8 {
		t.Errorf("readaheadFiles 0: key %s, want one of its own", k)
	}
	// "auto" is the default: the key of a volume without the attribute.
	if p, err = parseParams(map[string]string{"source": "s3://bucket/imagenet?region=us-east-1", "cacheSize": "1Gi", "readaheadFiles": "auto"}, 0); err != nil {
		t.Fatal(err)
	}
	if k := datasetKey(p, ""); k != before {
		t.Errorf("readaheadFiles auto: key %s, want %s (the default's)", k, before)
	}
	// cacheScope node (explicit) keeps the old key; cluster gets its own
	// mount and cache.
	src := map[string]string{"source": "s3://bucket/imagenet?region=us-east-1", "cacheSize": "1Gi", "cacheScope": "node"}
	if p, err = parseParams(src, 0); err != nil {
		t.Fatal(err)
	}
	if k := datasetKey(p, ""); k != before {
		t.Errorf("cacheScope node: key %s, want %s (the default's)", k, before)
	}
	src["cacheScope"] = "cluster"
	if p, err = parseParams(src, 0); err != nil {
		t.Fatal(err)
	}
	if k := datasetKey(p, ""); k == before {
		t.Error("cacheScope cluster: same dataset key as node scope")
	}
}

// TestCredentialsID: credentials are part of the dataset key through a keyed
// hash: no secrets keep the old key, other secrets or another node key give
// another id, and the id never holds the secret.
func TestCredentialsID(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	a := map[string]string{"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
	b := map[string]string{"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "other"}
	if credentialsID(k1, nil) != "" || credentialsID(k1, map[string]string{}) != "" {
		t.Error("no secrets must give the empty id (the key of a volume without secrets is unchanged)")
	}
	ids := map[string]bool{}
	for _, id := range []string{credentialsID(k1, a), credentialsID(k1, b), credentialsID(k2, a),
		credentialsID(k1, map[string]string{"AWS_SESSION_TOKEN": ""})} {
		if id == "" || ids[id] || strings.Contains(id, "s3cr3t") {
			t.Errorf("id %q: empty, repeated or holding the secret", id)
		}
		ids[id] = true
	}
	p := volumeParams{Source: "s3://bucket/x", CacheSize: 1 << 30, Policy: "nr"}
	if datasetKey(p, "") == datasetKey(p, credentialsID(k1, a)) {
		t.Error("credentials do not change the dataset key")
	}
}

// TestNodeKey: the node key is created 0600 on first start and reused.
func TestNodeKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	k1, err := loadNodeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || len(k1) != 32 {
		t.Fatalf("key file: %v, mode %v, %d bytes", err, st.Mode().Perm(), len(k1))
	}
	k2, err := loadNodeKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second start: %v, same key %v", err, bytes.Equal(k1, k2))
	}
}

// TestEventSafe: no error message the driver returns can be garbled by the
// kubelet's two fmt passes, and URLs read decoded.
func TestEventSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"s3://b/ds?endpoint=http%3A%2F%2F127.0.0.1%3A9000": "s3://b/ds?endpoint=http://127.0.0.1:9000",
		"budget of 80% (--cache-root-budget 80%)":          "budget of 80％ (--cache-root-budget 80％)",
		"trailing %":             "trailing ％",
		"bad escape %zz and %00": "bad escape ％zz and ％00",
	} {
		got := eventSafe(in)
		if got != want {
			t.Errorf("eventSafe(%q) = %q, want %q", in, got, want)
		}
		sprintf := fmt.Sprintf // called through a variable: the kubelet's two passes use the message as the format, on purpose
		if twice := sprintf(sprintf(got)); twice != got {
			t.Errorf("eventSafe(%q) = %q does not survive two fmt passes: %q", in, got, twice)
		}
	}
}
