package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// render plans tj and returns the pod template of its replica.
func render(t *testing.T, tj *v1alpha1.TrainingJob, replica string) corev1.PodTemplateSpec {
	t.Helper()
	p, err := newPlan(tj)
	if err != nil {
		t.Fatal(err)
	}
	return p.job(replica, Schedulers{Volcano: "volcano", SchedulerPlugins: "sp"}).Spec.Template
}

func testJob(name string, spec v1alpha1.TrainingJobSpec) *v1alpha1.TrainingJob {
	if spec.Image == "" {
		spec.Image = "x"
	}
	return &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: spec}
}

// shmOf returns the size of the memory-backed /dev/shm of a pod template,
// nil when it has none.
func shmOf(t *testing.T, tmpl corev1.PodTemplateSpec) *resource.Quantity {
	t.Helper()
	var mount *corev1.VolumeMount
	for i, m := range tmpl.Spec.Containers[0].VolumeMounts {
		if m.MountPath == "/dev/shm" {
			mount = &tmpl.Spec.Containers[0].VolumeMounts[i]
		}
	}
	if mount == nil {
		return nil
	}
	for _, v := range tmpl.Spec.Volumes {
		if v.Name == mount.Name {
			if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil {
				t.Fatalf("/dev/shm is volume %+v, want a memory-backed emptyDir with a sizeLimit", v)
			}
			if mount.ReadOnly {
				t.Errorf("/dev/shm mounted read-only")
			}
			return v.EmptyDir.SizeLimit
		}
	}
	t.Fatalf("/dev/shm mounts volume %q, which the pod does not have", mount.Name)
	return nil
}

func TestShmSize(t *testing.T) {
	for _, tc := range []struct {
		shm  *resource.Quantity
		want string // "" for no /dev/shm volume
	}{
		{nil, "2Gi"},
		{ptr.To(resource.MustParse("16Gi")), "16Gi"},
		{ptr.To(resource.MustParse("0")), ""},
	} {
		tj := testJob("j", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModeTensorFlow, ParameterServers: 1, ShmSize: tc.shm})
		for _, replica := range []string{v1alpha1.ReplicaWorker, v1alpha1.ReplicaPS} {
			got := shmOf(t, render(t, tj, replica))
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("shmSize %v: %s /dev/shm %v, want none", tc.shm, replica, got)
			case tc.want != "" && (got == nil || got.Cmp(resource.MustParse(tc.want)) != 0):
				t.Errorf("shmSize %v: %s /dev/shm %v, want %s", tc.shm, replica, got, tc.want)
			}
		}
	}
	// What the API server's rules refuse, the controller refuses too.
	for shm, want := range map[string]string{"-1": "shmSize -1 is negative", "500m": "shmSize 500m is not a whole number of bytes"} {
		_, err := newPlan(testJob("j", v1alpha1.TrainingJobSpec{Workers: 1, ShmSize: ptr.To(resource.MustParse(shm))}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("shmSize %s: %v, want %q", shm, err, want)
		}
	}
}
