package main

import (
	"strings"
	"testing"
)

// TestParseDatasetFlagEveryKind: `--dataset` takes every source kind the
// CSI driver mounts, with the mount path after the last ":/" (ports,
// schemes and query strings keep their colons).
func TestParseDatasetFlagEveryKind(t *testing.T) {
	for _, tc := range []struct{ flag, source, mount string }{
		{"a=/datasets/imagenet:/data/a", "/datasets/imagenet", "/data/a"},
		{"a=file:///datasets/imagenet:/data/a", "file:///datasets/imagenet", "/data/a"},
		{"a=s3://bkt/train?endpoint=http://minio:9000&region=us-east-1:/data/a", "s3://bkt/train?endpoint=http://minio:9000&region=us-east-1", "/data/a"},
		{"a=cephfs://reader@mon.ceph:6789/datasets/imagenet?fs=cephfs:/data/a", "cephfs://reader@mon.ceph:6789/datasets/imagenet?fs=cephfs", "/data/a"},
		{"a=cephfs://mon.ceph/datasets/imagenet:/data/a", "cephfs://mon.ceph/datasets/imagenet", "/data/a"},
		{"a=nfs://filer:2049/exports/imagenet:/data/a", "nfs://filer:2049/exports/imagenet", "/data/a"},
		{"a=mirror:s3://bkt/x?endpoint=http://m1:9000,nfs://filer/exports/x:/data/a", "mirror:s3://bkt/x?endpoint=http://m1:9000,nfs://filer/exports/x", "/data/a"},
	} {
		ds, err := parseDatasetFlag(tc.flag)
		if err != nil {
			t.Errorf("%s: %v", tc.flag, err)
			continue
		}
		if ds.Source != tc.source || ds.MountPath != tc.mount || ds.Name != "a" {
			t.Errorf("%s: source %q mount %q name %q, want %q %q a", tc.flag, ds.Source, ds.MountPath, ds.Name, tc.source, tc.mount)
		}
	}
	for flag, want := range map[string]string{
		"a=cephfs://:6789/x:/data/a":    "cephfs",
		"a=nfs://filer:/data/a":         "export path is empty",
		"a=cephfs://u:pw@mon/x:/data/a": "credentials in the URL are not allowed",
	} {
		_, err := parseDatasetFlag(flag)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", flag, err, want)
		}
	}
}
