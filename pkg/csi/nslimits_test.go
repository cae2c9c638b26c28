package csi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// tryStage stages volume id at a new staging path under work and returns
// the error.
func tryStage(td *testDriver, work, id string, vctx map[string]string) error {
	staging := filepath.Join(work, id)
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
	})
	return err
}

// pv is the volume context of a PersistentVolume of namespace ns ("": an
// admin's PV without the attribute) on dataset dir.
func pv(dir, cacheSize, ns string) map[string]string {
	m := map[string]string{"source": dir, "cacheSize": cacheSize}
	if ns != "" {
		m["csi.storage.k8s.io/pvc/namespace"] = ns
	}
	return m
}

// TestNamespaceLimits: one namespace holds at most --max-namespace-mounts
// dataset mounts and --max-namespace-cache-bytes of cacheSize on a node,
// whatever the node's own budget still has room for; a shared mount counts
// whole toward each namespace using it (joining another namespace's mount
// is charged, so it cannot be used to escape the cap); an admin's PV
// without a namespace is not limited; unstaging gives the room back.
// Refusals are ResourceExhausted naming the flag, and leave nothing
// mounted. On today's code (no per-namespace limits) the third mount of
// team-a and team-b's 32 MiB mount are accepted.
func TestNamespaceLimits(t *testing.T) {
	td := startDriver(t, func(c *csi.Config) {
		c.CacheRootBudget = csi.CacheBudget{Bytes: 1 << 30}
		c.MaxNamespaceMounts = 2
		c.MaxNamespaceCacheBytes = csi.CacheBudget{Bytes: 40 << 20}
	})
	work := td.workDir(t)
	x, y, z, w := mibDataset(t, 1), mibDataset(t, 1), mibDataset(t, 1), mibDataset(t, 1)

	for _, s := range []struct{ id, dir, size, ns string }{
		{"a1", x, "16Mi", "team-a"},
		{"a2", y, "16Mi", "team-a"},
		{"a2-again", y, "16Mi", "team-a"}, // the same mount: no new charge for team-a
		{"b1", x, "16Mi", "team-b"},       // team-a's mount of x, now charged to team-b too
		{"admin", z, "16Mi", ""},          // an admin's PV: not limited
	} {
		if err := tryStage(td, work, s.id, pv(s.dir, s.size, s.ns)); err != nil {
			t.Fatalf("stage %s (namespace %q): %v", s.id, s.ns, err)
		}
	}
	before := mountProcesses(t, td.stateDir)

	// team-a holds 2 mounts: a third, even of a dataset that runs (z, the
	// admin's), is over the cap.
	expectCode(t, tryStage(td, work, "a3", pv(w, "1Mi", "team-a")), codes.ResourceExhausted, "--max-namespace-mounts 2")
	expectCode(t, tryStage(td, work, "a3", pv(z, "16Mi", "team-a")), codes.ResourceExhausted, `namespace "team-a" already holds 2 dataset mounts`)
	// team-b holds 16 MiB (x): 32 MiB more is over its 40 MiB.
	expectCode(t, tryStage(td, work, "b2", pv(w, "32Mi", "team-b")), codes.ResourceExhausted, "--max-namespace-cache-bytes 40MiB")
	// The node's budget had room for both.
	if err := tryStage(td, work, "admin-w", pv(w, "32Mi", "")); err != nil {
		t.Fatalf("the admin's 32 MiB PV: %v", err)
	}
	// ...and a mount team-b joins counts whole for it, running or not.
	expectCode(t, tryStage(td, work, "b2", pv(w, "32Mi", "team-b")), codes.ResourceExhausted, "--max-namespace-cache-bytes")
	if err := tryStage(td, work, "b2", pv(y, "16Mi", "team-b")); err != nil {
		t.Errorf("team-b's second 16 MiB mount (32 MiB of 40): %v", err)
	}
	after := mountProcesses(t, td.stateDir)
	if len(after) != len(before)+1 { // admin-w only
		t.Errorf("mount processes: %d before the refusals, %d after; want one more (admin-w)", len(before), len(after))
	}
	for _, id := range []string{"a3"} {
		if m := mountsUnder(t, filepath.Join(work, id)); len(m) > 0 {
			t.Errorf("refused volume %s is mounted: %v", id, m)
		}
	}

	// Unstaging a1 leaves team-a one mount: a new one fits again, and a
	// volume team-a still uses (a2 on y) kept its charge.
	unstage(t, td, "a1", filepath.Join(work, "a1"))
	if err := tryStage(td, work, "a3", pv(z, "16Mi", "team-a")); err != nil {
		t.Errorf("team-a after unstaging one of its two mounts: %v", err)
	}
	expectCode(t, tryStage(td, work, "a4", pv(w, "1Mi", "team-a")), codes.ResourceExhausted, "--max-namespace-mounts")

	for _, id := range []string{"a2", "a2-again", "a3", "b1", "b2", "admin", "admin-w"} {
		unstage(t, td, id, filepath.Join(work, id))
	}
	nothingLeftBut(t, td, work, 4)
}

// TestNamespaceLimitPercent: --max-namespace-cache-bytes as a percentage is
// of the node's cache root budget (here 50% of 64 MiB: 32 MiB).
func TestNamespaceLimitPercent(t *testing.T) {
	td := startDriver(t, func(c *csi.Config) {
		c.CacheRootBudget = csi.CacheBudget{Bytes: 64 << 20}
		c.MaxNamespaceCacheBytes = csi.CacheBudget{Percent: 50}
	})
	work := td.workDir(t)
	expectCode(t, tryStage(td, work, "big", pv(mibDataset(t, 1), "33Mi", "team-a")), codes.ResourceExhausted, "32MiB (--max-namespace-cache-bytes 50") // the driver shows % as a full-width ％ (server.go)
	if err := tryStage(td, work, "fits", pv(mibDataset(t, 1), "32Mi", "team-a")); err != nil {
		t.Fatalf("32 MiB in a 32 MiB share: %v", err)
	}
	unstage(t, td, "fits", filepath.Join(work, "fits"))
}

// TestInlineLimits: an inline volume is charged to its pod's namespace (the
// key the kubelet writes with podInfoOnMount; a volume attribute naming
// another namespace's claim changes nothing), so a pod cannot spend another
// namespace's share nor escape its own; its cacheSize is bounded by
// --max-inline-cache-size (ResourceExhausted), lower than the limit of PVs.
// On today's code the 64 MiB inline volume is accepted and team-a's third
// mount too.
func TestInlineLimits(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "inline-limits")
	for _, p := range []string{"a/", "b/", "c/"} {
		mi.PutFiles(t, "inline-limits", p, datagen.Spec{Files: 2, Classes: 1, MedianSize: 1000, MinSize: 10, MaxSize: 4000, Seed: 3}.Plan())
	}
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}
	td := startDriver(t, func(c *csi.Config) {
		c.MaxInlineCacheSize = 32 << 20
		c.MaxNamespaceMounts = 2
		c.NetworkRules = []string{"s3://inline-limits?endpoint=" + mi.Endpoint} // MinIO is on loopback
	})
	work := td.workDir(t)
	inline := func(prefix, size, podNS string) map[string]string {
		m := map[string]string{"source": "s3://inline-limits/" + prefix + "?endpoint=" + mi.Endpoint, "csi.storage.k8s.io/ephemeral": "true",
			"csi.storage.k8s.io/pod.namespace": podNS, "csi.storage.k8s.io/pvc/namespace": "admin-forged"}
		if size != "" {
			m["cacheSize"] = size
		}
		return m
	}
	publishInline := func(id string, vctx map[string]string) (string, error) {
		target := filepath.Join(work, id)
		_, err := node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: target, VolumeCapability: readerCap, Readonly: true, VolumeContext: vctx, Secrets: secrets,
		})
		return target, err
	}

	_, err := publishInline("big", inline("a/", "64Mi", "team-a"))
	expectCode(t, err, codes.ResourceExhausted, "--max-inline-cache-size")
	if !strings.Contains(status.Convert(err).Message(), "32MiB") {
		t.Errorf("the refusal does not say the limit: %v", err)
	}
	// The same cacheSize on a PV is within --max-cache-size.
	if err := tryStage(td, work, "pv-big", pv(mibDataset(t, 1), "64Mi", "")); err != nil {
		t.Fatalf("a 64 MiB PV: %v", err)
	}
	unstage(t, td, "pv-big", filepath.Join(work, "pv-big"))

	// No cacheSize: the inline limit, not the 10 GiB default (which is
	// over it and would be refused).
	var targets []string
	for _, v := range []struct{ id, prefix string }{{"i1", "a/"}, {"i2", "b/"}} {
		target, err := publishInline(v.id, inline(v.prefix, "", "team-a"))
		if err != nil {
			t.Fatalf("inline %s of team-a: %v", v.id, err)
		}
		targets = append(targets, target)
	}
	// team-a's pods hold 2 mounts: the forged claim namespace does not help.
	_, err = publishInline("i3", inline("c/", "", "team-a"))
	expectCode(t, err, codes.ResourceExhausted, `namespace "team-a" already holds 2 dataset mounts`)
	target, err := publishInline("i4", inline("c/", "", "team-b"))
	if err != nil {
		t.Fatalf("inline of team-b: %v", err)
	}
	targets = append(targets, target)
	for i, id := range []string{"i1", "i2", "i4"} {
		unpublish(t, td, id, targets[i])
	}
}

// TestCreateVolumeKeepsClaimNamespace: the claim's namespace that the
// external-provisioner passes (--extra-create-metadata) is in the volume
// context CreateVolume returns, i.e. in the PV's attributes the node
// charges. Today it is dropped, and every dynamically provisioned volume
// is unlimited.
func TestCreateVolumeKeepsClaimNamespace(t *testing.T) {
	td := startDriver(t, nil)
	dir, _ := dataset(t)
	resp, err := controller(td).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{readerCap},
		Parameters: map[string]string{"source": dir, "csi.storage.k8s.io/pvc/namespace": "team-a", "csi.storage.k8s.io/pvc/name": "data"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetVolume().GetVolumeContext()["csi.storage.k8s.io/pvc/namespace"]; got != "team-a" {
		t.Errorf("volume context namespace %q, want team-a (context %v)", got, resp.GetVolume().GetVolumeContext())
	}
}
