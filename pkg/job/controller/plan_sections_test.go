package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestPlanSections: each section validator of newPlan, through newPlan (so
// the order of the sections counts too): the exact error of a bad spec, and
// what a good one sets.
func TestPlanSections(t *testing.T) {
	type spec = v1alpha1.TrainingJobSpec
	one := func(mutate func(*spec)) spec {
		s := spec{Image: "x", Workers: 1}
		mutate(&s)
		return s
	}
	tmpl := func(c corev1.Container, vols ...corev1.Volume) *v1alpha1.ReplicaSpec {
		return &v1alpha1.ReplicaSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: vols}}}
	}
	for _, tc := range []struct {
		section, name string
		spec          spec
		want          string             // the exact error; "" for a valid spec
		check         func(p *plan) bool // what a valid spec sets
	}{
		{"replicas", "defaults", one(func(*spec) {}), "",
			func(p *plan) bool { return p.mode == v1alpha1.ModeStandalone && p.port == defaultTorchPort }},
		{"replicas", "tensorflow port", one(func(s *spec) { s.Mode = v1alpha1.ModeTensorFlow }), "",
			func(p *plan) bool { return p.port == defaultTFPort }},
		{"replicas", "unknown mode", one(func(s *spec) { s.Mode = "jax" }), `mode "jax" is unknown: use standalone, pytorch, tensorflow or mpi`, nil},
		{"replicas", "no image", one(func(s *spec) { s.Image = " " }), "image is empty: set the container image of the workers", nil},
		{"replicas", "no workers", one(func(s *spec) { s.Workers = 0 }), "workers is 0: set at least 1", nil},
		{"replicas", "ps outside tensorflow", one(func(s *spec) { s.ParameterServers = 1 }), "parameterServers is only for mode tensorflow", nil},

		{"restarts", "defaults", one(func(s *spec) { s.BackoffLimit = ptr.To[int32](2) }), "",
			func(p *plan) bool {
				return p.backoff == 2 && p.maxRestarts == DefaultMaxRestarts && p.success == v1alpha1.SuccessAllWorkers
			}},
		{"restarts", "mpi default", one(func(s *spec) { s.Mode = v1alpha1.ModeMPI }), "",
			func(p *plan) bool { return p.success == v1alpha1.SuccessWorker0 }},
		{"restarts", "negative", one(func(s *spec) { s.MaxRestarts = ptr.To[int32](-1) }), "maxRestarts is -1: set at least 0", nil},
		{"restarts", "unknown success", one(func(s *spec) { s.SuccessPolicy = "Most" }), `successPolicy "Most" is unknown: use AllWorkers or Worker0`, nil},

		{"processes", "gpus", one(func(s *spec) { s.Resources.GPUs = 4 }), "", func(p *plan) bool { return p.nproc == 4 }},
		{"processes", "nproc zero", one(func(s *spec) { s.Mode, s.NprocPerNode = v1alpha1.ModePyTorch, ptr.To[int32](0) }),
			"nprocPerNode is 0: set at least 1 (torchrun's processes per worker pod, e.g. its GPUs)", nil},
		{"processes", "nproc outside pytorch", one(func(s *spec) { s.NprocPerNode = ptr.To[int32](2) }), "nprocPerNode is only for mode pytorch", nil},
		{"processes", "tensorflow outside its mode", one(func(s *spec) { s.TensorFlow = &v1alpha1.TensorFlowSpec{} }), "tensorflow is only for mode tensorflow", nil},
		{"processes", "chief", one(func(s *spec) { s.Mode, s.TensorFlow = v1alpha1.ModeTensorFlow, &v1alpha1.TensorFlowSpec{Chief: true} }), "",
			func(p *plan) bool { return p.chief && p.minMember == 2 }},

		{"pod meta", "label value", one(func(s *spec) { s.PodLabels = map[string]string{"team": "a b"} }),
			`podLabels["team"]: value "a b": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`, nil},
		{"pod meta", "controller's key", one(func(s *spec) { s.PodAnnotations = map[string]string{"jobs.epochfs.io/x": "1"} }),
			`pod label or annotation "jobs.epochfs.io/x": keys under jobs.epochfs.io/ are set by the controller`, nil},
		{"pod meta", "pull secret", one(func(s *spec) { s.ImagePullSecrets = []corev1.LocalObjectReference{{}} }), "imagePullSecrets[0]: the name is empty", nil},

		{"shm", "default", one(func(*spec) {}), "", func(p *plan) bool { return p.shm.Cmp(DefaultShmSize) == 0 }},
		{"shm", "off", one(func(s *spec) { s.ShmSize = ptr.To(resource.MustParse("0")) }), "", func(p *plan) bool { return p.shm == nil }},
		{"shm", "negative", one(func(s *spec) { s.ShmSize = ptr.To(resource.MustParse("-1Gi")) }),
			"shmSize -1Gi is negative: set a size such as 2Gi, or 0 for the container runtime's own /dev/shm", nil},

		{"gang", "two workers", one(func(s *spec) { s.Workers = 2 }), "",
			func(p *plan) bool { return p.gang && p.minMember == 2 && p.scheduler == v1alpha1.GangVolcano }},
		{"gang", "minAvailable", one(func(s *spec) { s.Workers, s.Gang = 2, &v1alpha1.Gang{MinAvailable: ptr.To[int32](3)} }),
			"gang.minAvailable 3 is more than the job's 2 pods", nil},

		{"resources", "template request", one(func(s *spec) {
			s.Resources.CPU = ptr.To(resource.MustParse("2"))
			s.Worker = tmpl(corev1.Container{Name: v1alpha1.ContainerName, Resources: corev1.ResourceRequirements{
				Requests: res("cpu", "4"), Limits: res("memory", "1Gi")}})
		}), "", func(p *plan) bool {
			return formatList(p.workerReqs) == "cpu=2, memory=1Gi" && formatList(p.psReqs) == "cpu=2"
		}},
		{"resources", "extra without a domain", one(func(s *spec) {
			s.Resources.Extra = map[corev1.ResourceName]resource.Quantity{"hca": resource.MustParse("1")}
		}), `resources.extra "hca": an extra resource needs a domain, e.g. rdma/hca_shared_devices_a`, nil},

		{"datasets", "claim and source", one(func(s *spec) {
			s.Datasets = []v1alpha1.Dataset{{Name: "d", ExistingClaim: "c", MountPath: "/d"}, {Name: "e", Source: "/data/e", MountPath: "/e"}}
		}), "", func(p *plan) bool {
			return len(p.datasets) == 2 && p.datasets[0].claimName == "c" && p.datasets[0].id == "" &&
				p.datasets[1].claimName == "j-e" && p.datasets[1].id != "" && p.datasets[1].attrs != nil
		}},
		{"datasets", "twice", one(func(s *spec) {
			s.Datasets = []v1alpha1.Dataset{{Name: "d", ExistingClaim: "c", MountPath: "/d"}, {Name: "d", ExistingClaim: "c", MountPath: "/e"}}
		}), `dataset "d" is listed twice`, nil},
		{"datasets", "both", one(func(s *spec) {
			s.Datasets = []v1alpha1.Dataset{{Name: "d", Source: "/data/d", ExistingClaim: "c", MountPath: "/d"}}
		}),
			`dataset "d": set source or existingClaim, not both`, nil},
		{"datasets", "neither", one(func(s *spec) { s.Datasets = []v1alpha1.Dataset{{Name: "d", MountPath: "/d"}} }),
			`dataset "d": set source (a dataset URL) or existingClaim (a PersistentVolumeClaim)`, nil},
		{"datasets", "relative", one(func(s *spec) { s.Datasets = []v1alpha1.Dataset{{Name: "d", ExistingClaim: "c", MountPath: "d"}} }),
			`dataset "d": mountPath "d" must be absolute`, nil},

		{"templates", "ps without servers", one(func(s *spec) { s.PS = tmpl(corev1.Container{Name: "x"}) }),
			"ps.template is set but parameterServers is 0: remove it or add parameter servers", nil},
		{"templates", "own volume", one(func(s *spec) { s.Worker = tmpl(corev1.Container{Name: "x"}, corev1.Volume{Name: shmVolume}) }),
			`worker.template.spec.volumes[0].name "` + shmVolume + `" is the controller's volume (/dev/shm): rename it`, nil},
		{"templates", "restart policy", one(func(s *spec) {
			s.Worker = tmpl(corev1.Container{Name: "x"})
			s.Worker.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}), "worker.template.spec.restartPolicy OnFailure: the controller's Jobs restart failed pods (backoffLimit): leave it empty or Never", nil},
	} {
		t.Run(tc.section+"/"+tc.name, func(t *testing.T) {
			p, err := newPlan(testJob("j", tc.spec))
			if tc.want != "" {
				if err == nil || err.Error() != tc.want {
					t.Fatalf("newPlan: %v\nwant %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(p) {
				t.Errorf("plan %+v", p)
			}
		})
	}
}
