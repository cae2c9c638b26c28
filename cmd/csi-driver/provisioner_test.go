package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestProvisionerMode runs `csi-driver --mode provisioner` against a real
// kube-apiserver: it takes the leader-election Lease, turns a claim of a
// StorageClass naming the driver into a PV (no PV controller runs here, so
// the test writes the provisioner annotation the PV controller would), serves
// the library's metrics, and ends on SIGTERM (status 1: the library exits
// when its context ends while leading).
func TestProvisionerMode(t *testing.T) {
	bin := testenv.GoBuild(t, "./cmd/csi-driver")
	k := kube.Start(t)
	client, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"epochfs-system", "team-a"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	p := startProc(t, bin, "--mode", "provisioner", "--kubeconfig", k.Kubeconfig, "--namespace", "epochfs-system",
		"--state-dir", filepath.Join(t.TempDir(), "state"), "--metrics-addr", metricsAddr, "--log-format", "text")

	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "datasets"}, Provisioner: csi.DriverName,
		Parameters: map[string]string{"source": "s3://training/imagenet?endpoint=http://127.0.0.1:9", "cacheSize": "64Mi"}}
	if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "imagenet", Namespace: "team-a",
			Annotations: map[string]string{"volume.kubernetes.io/storage-provisioner": csi.DriverName}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}, StorageClassName: &sc.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	created, err := client.CoreV1().PersistentVolumeClaims("team-a").Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvName := "pvc-" + string(created.UID)
	var pv *corev1.PersistentVolume
	waitFor(t, "the provisioned PV "+pvName, func() bool {
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err == nil
	})
	if pv.Spec.CSI == nil || pv.Spec.CSI.VolumeAttributes["csi.storage.k8s.io/pvc/namespace"] != "team-a" || pv.Spec.ClaimRef.Name != "imagenet" {
		t.Errorf("PV %+v: want a CSI PV of the claim team-a/imagenet", pv.Spec)
	}
	lease, err := client.CoordinationV1().Leases("epochfs-system").Get(ctx, csi.DriverName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Errorf("Lease epochfs-system/%s: %v", csi.DriverName, err)
	}
	if code, body := healthz(t, metricsAddr); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// The library counts a provisioning just after it stores the PV.
	waitFor(t, "the provisioning counter and epochfs_build_info on /metrics", func() bool {
		samples, _ := testenv.Scrape(t, "http://"+metricsAddr+"/metrics")
		return hasSample(samples, "controller_persistentvolumeclaim_provision_total") && hasSample(samples, "epochfs_build_info")
	})

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := p.wait(t); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("after SIGTERM: %v, want exit status 1 (the library's end of leadership)", err)
	}
}

func hasSample(samples map[string]float64, name string) bool {
	for k := range samples {
		if k == name || strings.HasPrefix(k, name+"{") {
			return true
		}
	}
	return false
}
