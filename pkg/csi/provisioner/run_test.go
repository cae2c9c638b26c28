package provisioner_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/epochfs/epochfs/pkg/csi/provisioner"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// TestRun runs the library's controller with leader election over a fake
// API server: it takes the Lease, provisions a claim that names the
// driver, and deletes the PV once released.
func TestRun(t *testing.T) {
	// The library ends the process when its context ends (it "loses" the
	// Lease); end only its goroutine here.
	exit, exited := klog.OsExit, make(chan struct{})
	klog.OsExit = func(int) { close(exited); runtime.Goexit() }

	c := class(map[string]string{volattr.Source: testSource})
	pvc := claim(corev1.ReadOnlyMany)
	storageClass := c.Name
	pvc.Spec.StorageClassName = &storageClass
	pvc.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": volattr.DriverName}
	client := fake.NewClientset(c, pvc)
	reg := prometheus.NewRegistry()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(func() {
		cancel()
		<-exited
		klog.OsExit = exit
	})
	go func() {
		err := provisioner.Run(ctx, client, provisioner.New(newDriver(t), client), provisioner.Options{
			LeaderElection: true, LeaderElectionNamespace: "epochfs-system", Registerer: reg})
		if err != nil {
			t.Error(err)
		}
	}()
	pvs := client.CoreV1().PersistentVolumes()
	pvName := "pvc-" + string(pvc.UID)
	var pv *corev1.PersistentVolume
	for {
		var err error
		if pv, err = pvs.Get(ctx, pvName, metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no PV %s for the claim: %v", pvName, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != pvc.Name || pv.Spec.StorageClassName != storageClass ||
		pv.Annotations["pv.kubernetes.io/provisioned-by"] != volattr.DriverName || pv.Spec.CSI.VolumeAttributes[volattr.ClaimName] != pvc.Name {
		t.Errorf("PV %+v: want it bound to the claim, of its class, provisioned by %s", pv, volattr.DriverName)
	}
	lease, err := client.CoordinationV1().Leases("epochfs-system").Get(ctx, volattr.DriverName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("leader-election Lease epochfs-system/%s: %v %+v", volattr.DriverName, err, lease)
	}

	// The claim deleted, the PV controller marks the PV Released.
	pv.Status.Phase = corev1.VolumeReleased
	if _, err := pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("released PV %s with reclaim policy Delete not deleted: %v", pvName, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The library counts a provisioning just after it stores the PV.
	for !gathered(t, reg, "controller_persistentvolumeclaim_provision_total") {
		if ctx.Err() != nil {
			t.Fatal("the library's provisioning counter is not in the registry")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gathered reports whether reg has a sample of the metric name.
func gathered(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return true
		}
	}
	return false
}

func TestRunOptions(t *testing.T) {
	for _, o := range []provisioner.Options{
		{LeaderElection: true},
		{LeaderElection: true, LeaderElectionNamespace: "x", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second},
		{LeaderElection: true, LeaderElectionNamespace: "x", RetryPeriod: time.Minute},
	} {
		if err := provisioner.Run(context.Background(), fake.NewClientset(), nil, o); err == nil {
			t.Errorf("Run with %+v: want refused", o)
		}
	}
}
