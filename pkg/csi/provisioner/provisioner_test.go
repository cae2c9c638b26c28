package provisioner_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/csi/provisioner"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/volattr"
)

const (
	testSource = "s3://training/imagenet?endpoint=http://127.0.0.1:9&region=us-east-1"
	secretKey  = "s3cr3t-value-never-shown"
)

// recorder is the real controller service of pkg/csi, with the requests
// it got recorded.
type recorder struct {
	*csi.Driver
	mu      sync.Mutex
	creates []*csipb.CreateVolumeRequest
}

func (r *recorder) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	r.mu.Lock()
	r.creates = append(r.creates, req)
	r.mu.Unlock()
	return r.Driver.CreateVolume(ctx, req)
}

// newDriver is pkg/csi's driver in controller mode over a temp state dir,
// as csi-driver --mode provisioner makes it (1GiB: its --max-cache-size).
func newDriver(t *testing.T) *recorder {
	t.Helper()
	dir := t.TempDir()
	d, err := csi.New(csi.Config{Endpoint: "unix://" + filepath.Join(dir, "unused.sock"), Mode: csi.ModeController,
		StateDir: filepath.Join(dir, "state"), MaxCacheSize: 1 << 30, DefaultCacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{Driver: d}
}

func class(params map[string]string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "datasets"}, Provisioner: volattr.DriverName, Parameters: params}
}

func claim(modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "imagenet", Namespace: "team-a", UID: "1234"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes,
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
}

func options(c *storagev1.StorageClass, pvc *corev1.PersistentVolumeClaim) controller.ProvisionOptions {
	return controller.ProvisionOptions{StorageClass: c, PVC: pvc, PVName: "pvc-1234"}
}

func s3Secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{"AWS_SECRET_ACCESS_KEY": []byte(secretKey)}}
}

func TestProvision(t *testing.T) {
	d := newDriver(t)
	client := fake.NewClientset(s3Secret("epochfs-system", "prov-team-a"))
	p := provisioner.New(d, client)
	retain := corev1.PersistentVolumeReclaimRetain
	c := class(map[string]string{
		volattr.Source: testSource, volattr.CacheSize: "64Mi",
		provisioner.ProvisionerSecretName: "prov-${pvc.namespace}", provisioner.ProvisionerSecretNamespace: "epochfs-system",
		provisioner.NodeStageSecretName: "${pvc.name}-s3", provisioner.NodeStageSecretNamespace: "${pvc.namespace}",
		provisioner.NodePublishSecretName: "pub-${pv.name}", provisioner.NodePublishSecretNamespace: "other",
	})
	c.MountOptions = []string{"noatime"}
	c.ReclaimPolicy = &retain
	pv, state, err := p.Provision(context.Background(), options(c, claim(corev1.ReadOnlyMany)))
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision: %v, %s", err, state)
	}
	src := pv.Spec.CSI
	if pv.Name != "pvc-1234" || src == nil || src.Driver != volattr.DriverName || !strings.HasPrefix(src.VolumeHandle, "cfs-") || !src.ReadOnly {
		t.Fatalf("PV %s with CSI source %+v", pv.Name, src)
	}
	canonical, err := source.Parse(testSource)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{volattr.Source: canonical.String(), volattr.CacheSize: "67108864", volattr.Policy: "nr",
		volattr.ClaimName: "imagenet", volattr.ClaimNamespace: "team-a", volattr.PVName: "pvc-1234"}
	for k, v := range want {
		if src.VolumeAttributes[k] != v {
			t.Errorf("volume attribute %s = %q, want %q (all: %v)", k, src.VolumeAttributes[k], v, src.VolumeAttributes)
		}
	}
	for k := range src.VolumeAttributes {
		if strings.Contains(k, "secret") {
			t.Errorf("volume attribute %s: secret parameters must be stripped", k)
		}
	}
	if got := src.NodeStageSecretRef; got == nil || *got != (corev1.SecretReference{Name: "imagenet-s3", Namespace: "team-a"}) {
		t.Errorf("nodeStageSecretRef %+v, want team-a/imagenet-s3", got)
	}
	if got := src.NodePublishSecretRef; got == nil || *got != (corev1.SecretReference{Name: "pub-pvc-1234", Namespace: "other"}) {
		t.Errorf("nodePublishSecretRef %+v, want other/pub-pvc-1234", got)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != retain || len(pv.Spec.MountOptions) != 1 || pv.Spec.MountOptions[0] != "noatime" {
		t.Errorf("reclaim policy %s, mount options %v: want the StorageClass's", pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.MountOptions)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 2<<30 || len(pv.Spec.AccessModes) != 1 || pv.Spec.AccessModes[0] != corev1.ReadOnlyMany {
		t.Errorf("capacity %s, access modes %v: want the claim's 2Gi, ReadOnlyMany", q.String(), pv.Spec.AccessModes)
	}

	req := d.creates[0]
	if req.Name != "pvc-1234" || req.Secrets["AWS_SECRET_ACCESS_KEY"] != secretKey || req.CapacityRange.GetRequiredBytes() != 2<<30 {
		t.Errorf("CreateVolume got name %q, capacity %v, secrets of keys %v: want the PV name, the claim's request, the provisioner secret", req.Name, req.CapacityRange, keys(req.Secrets))
	}
	for k := range req.Parameters {
		if strings.HasSuffix(k, "-secret-name") || strings.HasSuffix(k, "-secret-namespace") {
			t.Errorf("CreateVolume got secret parameter %s", k)
		}
	}
	if m := req.VolumeCapabilities[0].GetAccessMode().GetMode(); m != csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY {
		t.Errorf("access mode %s, want MULTI_NODE_READER_ONLY for ReadOnlyMany", m)
	}

	// The same claim again (the library retries after a failed PV create):
	// the same volume, CreateVolume being idempotent.
	again, _, err := p.Provision(context.Background(), options(c, claim(corev1.ReadOnlyMany)))
	if err != nil || again.Spec.CSI.VolumeHandle != src.VolumeHandle {
		t.Fatalf("second Provision: %v, handle %v", err, again)
	}
}

func TestProvisionDefaults(t *testing.T) {
	p := provisioner.New(newDriver(t), fake.NewClientset())
	pv, _, err := p.Provision(context.Background(), options(class(map[string]string{volattr.Source: testSource}), claim(corev1.ReadWriteOnce)))
	if err != nil {
		t.Fatal(err)
	}
	src := pv.Spec.CSI
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("reclaim policy %s, want Delete when the StorageClass sets none", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if src.NodeStageSecretRef != nil || src.NodePublishSecretRef != nil || src.VolumeAttributes[volattr.CacheSize] != "1048576" {
		t.Errorf("secret refs %v %v, cacheSize %q: want none and the driver's default", src.NodeStageSecretRef, src.NodePublishSecretRef, src.VolumeAttributes[volattr.CacheSize])
	}
}

func TestProvisionRefused(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	for _, tc := range []struct {
		name   string
		params map[string]string
		claim  func(*corev1.PersistentVolumeClaim)
		code   codes.Code // of CreateVolume's status; OK: refused before it
		want   string
	}{
		{name: "no source", params: map[string]string{}, code: codes.InvalidArgument, want: `"source"`},
		{name: "unknown parameter", params: map[string]string{volattr.Source: testSource, "colour": "blue"}, code: codes.InvalidArgument, want: "colour"},
		{name: "cache over the limit", params: map[string]string{volattr.Source: testSource, volattr.CacheSize: "2GiB"}, code: codes.OutOfRange, want: "--max-cache-size"},
		{name: "writer access mode", params: map[string]string{volattr.Source: testSource}, claim: func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}, code: codes.InvalidArgument, want: "MULTI_NODE_MULTI_WRITER"},
		{name: "fstype", params: map[string]string{volattr.Source: testSource, "csi.storage.k8s.io/fstype": "ext4"}, want: "csi.storage.k8s.io/fstype"},
		{name: "expand secret", params: map[string]string{volattr.Source: testSource, "csi.storage.k8s.io/controller-expand-secret-name": "x"}, want: "not expanded"},
		{name: "claim identity from the class", params: map[string]string{volattr.Source: testSource, volattr.ClaimNamespace: "kube-system"}, want: "pvc/namespace"},
		{name: "secret name without namespace", params: map[string]string{volattr.Source: testSource, provisioner.NodeStageSecretName: "s3"}, want: "go together"},
		{name: "annotation template", params: map[string]string{volattr.Source: testSource,
			provisioner.NodeStageSecretName: "${pvc.annotations['team']}", provisioner.NodeStageSecretNamespace: "x"}, want: "${pvc.annotations['team']} not supported"},
		{name: "pvc.name in a namespace", params: map[string]string{volattr.Source: testSource,
			provisioner.NodeStageSecretName: "s3", provisioner.NodeStageSecretNamespace: "${pvc.name}"}, want: "${pvc.name} not supported"},
		{name: "not a secret name", params: map[string]string{volattr.Source: testSource,
			provisioner.NodeStageSecretName: "S3_Keys", provisioner.NodeStageSecretNamespace: "x"}, want: "is not a Secret name"},
		{name: "missing provisioner secret", params: map[string]string{volattr.Source: testSource,
			provisioner.ProvisionerSecretName: "gone", provisioner.ProvisionerSecretNamespace: "x"}, want: "provisioner secret x/gone not found"},
		{name: "selector", params: map[string]string{volattr.Source: testSource}, claim: func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{}
		}, want: "selectors"},
		{name: "data source", params: map[string]string{volattr.Source: testSource}, claim: func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "s"}
		}, want: "data sources"},
		{name: "block", params: map[string]string{volattr.Source: testSource}, claim: func(c *corev1.PersistentVolumeClaim) {
			c.Spec.VolumeMode = &block
		}, want: "Block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t)
			p := provisioner.New(d, fake.NewClientset(s3Secret("x", "other")))
			pvc := claim(corev1.ReadOnlyMany)
			if tc.claim != nil {
				tc.claim(pvc)
			}
			pv, state, err := p.Provision(context.Background(), options(class(tc.params), pvc))
			if err == nil || pv != nil || state != controller.ProvisioningFinished {
				t.Fatalf("Provision: PV %v, state %s, error %v: want refused", pv, state, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), secretKey) {
				t.Errorf("error %q: want it to name %q (and no secret)", err, tc.want)
			}
			if st, ok := status.FromError(err); tc.code != codes.OK && (!ok || st.Code() != tc.code) {
				t.Errorf("error %v: want CreateVolume's %s", err, tc.code)
			}
			if tc.code == codes.OK && len(d.creates) != 0 {
				t.Errorf("CreateVolume called for a claim refused before it")
			}
		})
	}
}

func TestDelete(t *testing.T) {
	d := newDriver(t)
	p := provisioner.New(d, fake.NewClientset())
	pv, _, err := p.Provision(context.Background(), options(class(map[string]string{volattr.Source: testSource}), claim(corev1.ReadOnlyMany)))
	if err != nil {
		t.Fatal(err)
	}
	validate := func() error {
		_, err := d.ValidateVolumeCapabilities(context.Background(), &csipb.ValidateVolumeCapabilitiesRequest{
			VolumeId: pv.Spec.CSI.VolumeHandle, VolumeCapabilities: d.creates[0].VolumeCapabilities})
		return err
	}
	if err := validate(); err != nil {
		t.Fatalf("the provisioned volume is unknown to the controller: %v", err)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if st, _ := status.FromError(validate()); st.Code() != codes.NotFound {
		t.Errorf("after Delete, ValidateVolumeCapabilities: %v, want NotFound (the record forgotten)", st)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Errorf("second Delete: %v, want nil (idempotent)", err)
	}

	other := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
		CSI: &corev1.CSIPersistentVolumeSource{Driver: "other.csi.example.com", VolumeHandle: "v"}}}}
	var ignored *controller.IgnoredError
	if err := p.Delete(context.Background(), other); !errors.As(err, &ignored) {
		t.Errorf("Delete of another driver's PV: %v, want IgnoredError", err)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
