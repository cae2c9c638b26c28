package e2e

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// TestDynamicProvisioning installs the chart with the controller
// (controller.enabled: csi-driver --mode=provisioner with leader election,
// no sidecar) and provisions through a StorageClass as users do: a PVC
// against a class with the dataset's parameters and templated secrets
// (the provisioner secret read through controller.secretNamespaces, the
// node-stage secret copied into the PV) binds to the PV the provisioner
// made, with the claim's identity in its attributes (SubjectAccessReviews
// show the controller may get Secrets in that namespace only, and write PVs
// but no pods or Nodes); a pod reads every byte
// of the dataset byte-exact through it; deleting the PVC deletes the PV
// (reclaim Delete) and leaves the dataset as it was. A class with a bad
// parameter gets its claim a ProvisioningFailed event naming it.
func TestDynamicProvisioning(t *testing.T) {
	requireE2E(t)
	mi := s3.StartMinIO(t)
	in := installChart(t, minioRules(mi, "training")...)
	mi.MakeBucket(t, "training")
	files := datagen.Spec{Files: 50, Classes: 3, MedianSize: 25_000, MinSize: 300, MaxSize: 250_000, Seed: 25}.Plan()
	mi.PutFiles(t, "training", "imagenet/", files)
	const ns = "tenant-p"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	in.createNamespace(ctx, t, ns) // before the upgrade: the chart puts a Role there
	in.enableProvisioner(t, ns)
	checkControllerRBAC(ctx, t, in, ns)
	in.createS3Secret(ctx, t, ns, "imagenet-s3", mi)
	sc := in.createStorageClass(ctx, t, "epochfs-e2e-imagenet", map[string]string{
		volattr.Source: s3Source(mi, "training", "imagenet"), volattr.CacheSize: "64Mi",
		// Templates, as external-provisioner resolves them.
		"csi.storage.k8s.io/provisioner-secret-name": "${pvc.name}-s3", "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
		"csi.storage.k8s.io/node-stage-secret-name": "${pvc.name}-s3", "csi.storage.k8s.io/node-stage-secret-namespace": "${pvc.namespace}",
	})
	start := time.Now()
	pvc := in.createClaim(ctx, t, ns, "imagenet", sc)
	pvName := in.waitBound(ctx, t, ns, pvc)
	fmt.Printf("PVC %s/%s Bound to %s %.1fs after create\n", ns, pvc, pvName, time.Since(start).Seconds())

	pv, err := in.c.Client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := pv.Spec.CSI
	if src == nil || src.Driver != csi.DriverName || !src.ReadOnly || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.Annotations["pv.kubernetes.io/provisioned-by"] != csi.DriverName {
		t.Fatalf("PV %s: CSI source %+v, reclaim %s, annotations %v", pvName, src, pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations)
	}
	for k, want := range map[string]string{volattr.ClaimName: pvc, volattr.ClaimNamespace: ns, volattr.PVName: pvName, volattr.CacheSize: "67108864"} {
		if src.VolumeAttributes[k] != want {
			t.Errorf("PV attribute %s = %q, want %q", k, src.VolumeAttributes[k], want)
		}
	}
	if ref := src.NodeStageSecretRef; ref == nil || ref.Name != "imagenet-s3" || ref.Namespace != ns {
		t.Errorf("PV nodeStageSecretRef %+v, want %s/imagenet-s3", ref, ns)
	}
	for k := range src.VolumeAttributes {
		if strings.Contains(k, "secret") {
			t.Errorf("PV attribute %s: the secret parameters must be stripped", k)
		}
	}

	v := s3Volume{ns: ns, pvName: pvName, pvcName: pvc}
	in.readerPod(ctx, t, v, "reader", "read-dataset", "/data", "1")
	in.waitPod(ctx, t, ns, "reader", corev1.PodSucceeded)
	checkPasses(t, passSums(t, in.podLog(ctx, t, ns, "reader")), files, 1)
	fmt.Printf("reader pod: every byte of %d files (%d bytes) byte-exact through the provisioned PV\n", len(files), datagen.TotalSize(files))

	in.deletePod(ctx, t, ns, "reader")
	if err := in.c.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for {
		_, err := in.c.Client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			in.describeController(t)
			t.Fatalf("PV %s still there after its PVC was deleted (reclaim Delete): %v", pvName, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	fmt.Printf("PV %s deleted %.1fs after its PVC\n", pvName, time.Since(deleted).Seconds())
	checkBucket(ctx, t, mi, "training", "imagenet/", files)

	bad := in.createStorageClass(ctx, t, "epochfs-e2e-bad", map[string]string{volattr.Source: s3Source(mi, "training", "imagenet"), "colour": "blue"})
	badClaim := in.createClaim(ctx, t, ns, "bad", bad)
	ev := in.waitClaimEvent(ctx, t, ns, badClaim, "ProvisioningFailed", `"colour"`)
	fmt.Printf("PVC of a class with an unknown parameter: %s\n", ev)
}

// enableProvisioner turns the controller on with a helm upgrade of the
// release (the API server's address is known once the cluster runs): one
// replica, still leader-elected (two would both bind the controller's port
// on this one node, hostNetwork), reading provisioner secrets in ns.
func (in *install) enableProvisioner(t *testing.T, ns string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort := apiServerAddress(t, in.c)
	in.helmRun(t, "upgrade", chartRelease, filepath.Join(root, "deploy", "helm", "epochfs"),
		"--namespace", chartNamespace, "--reuse-values",
		"--set", "controller.enabled=true", "--set", "controller.replicas=1",
		"--set", "controller.hostNetwork=true", "--set", "controller.metricsPort="+strconv.Itoa(testenv.FreePort(t)),
		"--set", "controller.secretNamespaces={"+ns+"}",
		"--set", "controller.extraEnv[0].name=KUBERNETES_SERVICE_HOST", "--set-string", "controller.extraEnv[0].value="+apiHost,
		"--set", "controller.extraEnv[1].name=KUBERNETES_SERVICE_PORT", "--set-string", "controller.extraEnv[1].value="+apiPort)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		lease, err := in.c.Client.CoordinationV1().Leases(chartNamespace).Get(ctx, csi.DriverName, metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
			fmt.Printf("provisioner leader: %s (Lease %s/%s)\n", *lease.Spec.HolderIdentity, chartNamespace, csi.DriverName)
			return
		}
		if ctx.Err() != nil {
			in.describeController(t)
			t.Fatalf("no provisioner holds Lease %s/%s: %v", chartNamespace, csi.DriverName, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkControllerRBAC asks the API server (SubjectAccessReviews) what the
// controller's ServiceAccount may do: Secrets only get, only in the
// namespace of controller.secretNamespaces; PVs but no Nodes or pods.
func checkControllerRBAC(ctx context.Context, t *testing.T, in *install, secretNS string) {
	t.Helper()
	user := "system:serviceaccount:" + chartNamespace + ":epochfs-controller"
	for _, c := range []struct {
		attr authorizationv1.ResourceAttributes
		want bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: secretNS}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: secretNS}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: chartNamespace}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "persistentvolumes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "delete", Resource: "persistentvolumes"}, true},
		{authorizationv1.ResourceAttributes{Verb: "patch", Resource: "persistentvolumes"}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "persistentvolumeclaims", Namespace: secretNS}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: chartNamespace}, true},
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes"}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: secretNS}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace}, ResourceAttributes: &c.attr}}
		got, err := in.c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.want {
			t.Errorf("the controller may %s %s in %q: %v, want %v", c.attr.Verb, c.attr.Resource, c.attr.Namespace, got.Status.Allowed, c.want)
		}
	}
}

// describeController logs the controller pod.
func (in *install) describeController(t *testing.T) {
	t.Helper()
	if p := in.componentPod(context.Background(), "controller"); p != nil {
		in.describe(t, chartNamespace, p.Name)
	} else {
		t.Log("no controller pod")
	}
}

// createStorageClass creates a StorageClass of the driver (removed in
// t.Cleanup) and returns its name.
func (in *install) createStorageClass(ctx context.Context, t *testing.T, name string, params map[string]string) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: csi.DriverName, Parameters: params}
	if _, err := in.c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.c.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// createClaim creates a ReadOnlyMany PVC of class and returns its name.
func (in *install) createClaim(ctx context.Context, t *testing.T, ns, name, class string) string {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}, StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := in.c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// waitBound waits for PVC ns/name to be Bound and returns its PV's name.
func (in *install) waitBound(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	for {
		pvc, err := in.c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pvc.Status.Phase == corev1.ClaimBound {
			return pvc.Spec.VolumeName
		}
		if ctx.Err() != nil {
			in.logEvents(t, ns, name)
			in.describeController(t)
			t.Fatalf("PVC %s/%s not Bound: %v", ns, name, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitClaimEvent waits for an event of PVC ns/name with reason whose
// message holds want, and returns it.
func (in *install) waitClaimEvent(ctx context.Context, t *testing.T, ns, name, reason, want string) string {
	t.Helper()
	for {
		events, err := in.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err == nil {
			for _, e := range events.Items {
				if e.Reason == reason && strings.Contains(e.Message, want) {
					return e.Reason + ": " + e.Message
				}
			}
		}
		if ctx.Err() != nil {
			in.logEvents(t, ns, name)
			in.describeController(t)
			t.Fatalf("no %s event of PVC %s/%s says %s", reason, ns, name, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// logEvents logs the events of object ns/name.
func (in *install) logEvents(t *testing.T, ns, name string) {
	t.Helper()
	events, err := in.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Logf("events of %s/%s: %v", ns, name, err)
		return
	}
	for _, e := range events.Items {
		t.Logf("event of %s/%s: %s %s: %s", ns, name, e.Type, e.Reason, e.Message)
	}
}

// checkBucket checks that bucket/prefix holds exactly files, each with its
// content (the ETag of a single-part upload is the MD5 of its bytes).
func checkBucket(ctx context.Context, t *testing.T, mi *s3.MinIO, bucket, prefix string, files []datagen.File) {
	t.Helper()
	want := map[string]string{}
	for _, f := range files {
		sum := md5.Sum(datagen.Content(f))
		want[prefix+f.Path] = hex.EncodeToString(sum[:])
	}
	got := map[string]string{}
	for o := range mi.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		got[o.Key] = strings.Trim(o.ETag, `"`)
	}
	if len(got) != len(want) {
		t.Errorf("bucket %s/%s holds %d objects after the volume's deletion, want the dataset's %d", bucket, prefix, len(got), len(want))
	}
	for k, sum := range want {
		if got[k] != sum {
			t.Errorf("object %s: ETag %q, want %q (the dataset must stay untouched)", k, got[k], sum)
		}
	}
}
