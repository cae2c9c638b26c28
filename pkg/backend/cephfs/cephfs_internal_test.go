//go:build ceph

package cephfs

import (
	"testing"

	"github.com/epochfs/epochfs/pkg/source"
)

func TestCephFSMonAddr(t *testing.T) {
	for in, want := range map[string]string{
		"mon1":            "mon1",
		"mon1:6789":       "v1:mon1:6789",
		"mon1:3300":       "v2:mon1:3300",
		"10.0.0.1:13300":  "v2:10.0.0.1:13300",
		"[fd00::1]:3300":  "v2:[fd00::1]:3300",
		"[fd00::1]:6789":  "v1:[fd00::1]:6789",
		"ceph-mon-a.ceph": "ceph-mon-a.ceph",
	} {
		if got := monAddr(in); got != want {
			t.Errorf("monAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCephFSID(t *testing.T) {
	src, err := source.Parse("cephfs://alice@mon1:3300/volumes/a b/ds/?fs=cephfs")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cephfsID(src), "cephfs://mon1:3300/volumes/a%20b/ds/?fs=cephfs"; got != want {
		t.Errorf("cephfsID = %q, want %q", got, want)
	}
	src.FS = ""
	if got, want := cephfsID(src), "cephfs://mon1:3300/volumes/a%20b/ds/"; got != want {
		t.Errorf("cephfsID = %q, want %q", got, want)
	}
}
