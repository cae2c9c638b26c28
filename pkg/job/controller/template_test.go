package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// checkpointTemplate is a worker template with a writable emptyDir for
// checkpoints, a sidecar, an init container, its own labels, a node
// affinity requirement and a trainer with its own env, limits and mounts.
func checkpointTemplate() *v1alpha1.ReplicaSpec {
	return &v1alpha1.ReplicaSpec{Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "resnet"}, Annotations: map[string]string{"example.com/a": "b"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "fetch", Image: "busybox", Command: []string{"true"}}},
			Containers: []corev1.Container{
				{Name: "metrics", Image: "exporter:1", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}},
					VolumeMounts: []corev1.VolumeMount{{Name: "dataset-imagenet", MountPath: "/peek", ReadOnly: true}}},
				{Name: "trainer", Image: "ignored", Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "EPOCHS", Value: "1"}},
					Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": resource.MustParse("8Gi")}, Limits: corev1.ResourceList{"memory": resource.MustParse("12Gi")}},
					VolumeMounts: []corev1.VolumeMount{{Name: "checkpoints", MountPath: "/ckpt"}}},
			},
			Volumes: []corev1.Volume{{Name: "checkpoints", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			}}},
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
		},
	}}
}

func templateJob(tmpl *v1alpha1.ReplicaSpec) *v1alpha1.TrainingJob {
	return testJob("resnet", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModePyTorch, Worker: tmpl,
		Env:       []corev1.EnvVar{{Name: "EPOCHS", Value: "90"}},
		Resources: v1alpha1.WorkerResources{CPU: ptr.To(resource.MustParse("4"))},
		Datasets:  []v1alpha1.Dataset{{Name: "imagenet", Source: "/data/imagenet", MountPath: "/data/imagenet"}}})
}

// TestTemplateMerge: the template's containers, volumes, metadata and
// affinity stay; the controller's are added; the spec's fields win.
func TestTemplateMerge(t *testing.T) {
	tmpl := render(t, templateJob(checkpointTemplate()), v1alpha1.ReplicaWorker)
	pod := tmpl.Spec
	if len(pod.Containers) != 2 || pod.Containers[0].Name != "metrics" || pod.Containers[1].Name != "trainer" || len(pod.InitContainers) != 1 {
		t.Fatalf("containers %v init %v", pod.Containers, pod.InitContainers)
	}
	c := pod.Containers[1]
	if c.Image != "x" {
		t.Errorf("trainer image %q, want the spec's", c.Image)
	}
	env := podEnv(t, tmpl, 0)
	if env["NCCL_DEBUG"] != "INFO" || env["EPOCHS"] != "90" || env["PET_NODE_RANK"] != "0" {
		t.Errorf("env: the template's, then spec.env, after the controller's: %v", env)
	}
	if r := c.Resources; r.Requests.Cpu().String() != "4" || r.Requests.Memory().String() != "8Gi" || r.Limits.Memory().String() != "12Gi" {
		t.Errorf("trainer resources %+v: want the spec's cpu, the template's memory request and limit", r)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m := mounts["/ckpt"]; m.Name != "checkpoints" || m.ReadOnly {
		t.Errorf("checkpoint mount %+v, want a writable checkpoints", m)
	}
	if m := mounts["/data/imagenet"]; !m.ReadOnly || mounts["/dev/shm"].Name != shmVolume {
		t.Errorf("mounts %v", c.VolumeMounts)
	}
	var names []string
	for _, v := range pod.Volumes {
		names = append(names, v.Name)
	}
	if want := []string{"checkpoints", "dataset-imagenet", shmVolume}; !slices.Equal(names, want) {
		t.Errorf("volumes %v, want %v", names, want)
	}
	if tmpl.Labels["app"] != "resnet" || tmpl.Labels[v1alpha1.LabelJobName] != "resnet" || tmpl.Annotations["example.com/a"] != "b" {
		t.Errorf("metadata %v %v", tmpl.Labels, tmpl.Annotations)
	}
	na := pod.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("affinity %+v: want the template's requirement, and no cache preference without cache locations", na)
	}
	// With a node caching the dataset (its location Lease), the
	// preferences are added beside the template's requirement.
	pl, err := newPlan(templateJob(checkpointTemplate()))
	if err != nil {
		t.Fatal(err)
	}
	pl.locations = map[string][]cachelabel.Location{pl.datasets[0].id: {{Node: "gpu-a", Percent: 100}}}
	na = pl.job(v1alpha1.ReplicaWorker, Schedulers{}).Spec.Template.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.PreferredDuringSchedulingIgnoredDuringExecution) != 4 {
		t.Errorf("affinity %+v: want the template's requirement and the cache preferences", na)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || pod.Subdomain != "resnet" || pod.SecurityContext == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod %+v", pod)
	}
	// The capacity check counts the template's memory request.
	p, _ := newPlan(templateJob(checkpointTemplate()))
	if q := p.workerReqs[corev1.ResourceMemory]; q.String() != "8Gi" {
		t.Errorf("worker requests %v", p.workerReqs)
	}
	// A template limit without a request is the request too, as
	// Kubernetes defaults it, and is kept as the limit.
	rs := checkpointTemplate()
	rs.Template.Spec.Containers[1].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}}
	tj := templateJob(rs)
	tj.Spec.Resources = v1alpha1.WorkerResources{}
	if p, err := newPlan(tj); err != nil {
		t.Fatal(err)
	} else if p.workerReqs.Name("example.com/fpga", resource.DecimalSI).Value() != 1 {
		t.Errorf("worker requests %v, want example.com/fpga 1 from the template's limit", p.workerReqs)
	}
	if r := trainer(t, render(t, tj, v1alpha1.ReplicaWorker)).Resources; r.Limits.Name("example.com/fpga", resource.DecimalSI).Value() != 1 {
		t.Errorf("trainer resources %+v", r)
	}
	// Without a template a trainer is added first.
	if c := render(t, templateJob(nil), v1alpha1.ReplicaWorker).Spec.Containers; len(c) != 1 || c[0].Name != "trainer" {
		t.Errorf("containers %v", c)
	}
}

// TestTemplateHostNetworkPort: a trainer declares the rendezvous port,
// except in the node's network, where a declared port is a host port and
// would keep the job's second worker off the node; the Service and the
// environment keep the port either way.
func TestTemplateHostNetworkPort(t *testing.T) {
	rendezvous := func(c *corev1.Container) bool {
		return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == "rendezvous" })
	}
	if c := trainer(t, render(t, templateJob(checkpointTemplate()), v1alpha1.ReplicaWorker)); !rendezvous(c) {
		t.Errorf("trainer ports %v: want the rendezvous port", c.Ports)
	}
	rs := checkpointTemplate()
	rs.Template.Spec.HostNetwork = true
	tmpl := render(t, templateJob(rs), v1alpha1.ReplicaWorker)
	if c := trainer(t, tmpl); rendezvous(c) {
		t.Errorf("hostNetwork trainer ports %v: want no rendezvous port (it would be a host port)", c.Ports)
	}
	if m := tmpl.Spec.Containers[0]; len(m.Ports) != 1 || m.Ports[0].ContainerPort != 9400 {
		t.Errorf("the sidecar's own ports %v must stay", m.Ports)
	}
	if env := podEnv(t, tmpl, 0); env["PET_MASTER_PORT"] == "" {
		t.Errorf("hostNetwork: PET_MASTER_PORT missing from %v", env)
	}
}

// TestTemplateRefused: what a template may not do, refused naming the field.
func TestTemplateRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.PodTemplateSpec)
		want   string
	}{
		{"volume named as a dataset's", func(p *corev1.PodTemplateSpec) { p.Spec.Volumes[0].Name = "dataset-imagenet" },
			`worker.template.spec.volumes[0].name "dataset-imagenet" is the controller's volume (dataset imagenet)`},
		{"volume named dshm", func(p *corev1.PodTemplateSpec) { p.Spec.Volumes[0].Name = "dshm" }, `worker.template.spec.volumes[0].name "dshm" is the controller's volume`},
		{"duplicate volume", func(p *corev1.PodTemplateSpec) { p.Spec.Volumes = append(p.Spec.Volumes, p.Spec.Volumes[0]) }, `worker.template.spec.volumes[1].name "checkpoints" is listed twice`},
		{"writable dataset mount", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].VolumeMounts[0].ReadOnly = false },
			`worker.template.spec.containers[0].volumeMounts[0] mounts dataset imagenet writable`},
		{"writable dataset claim", func(p *corev1.PodTemplateSpec) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "resnet-imagenet"}}})
		}, `worker.template.spec.volumes[1] mounts the claim resnet-imagenet of dataset "imagenet" writable`},
		{"mount over a dataset", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[1].VolumeMounts[0].MountPath = "/data/imagenet/" },
			`worker.template.spec.containers[1].volumeMounts[0].mountPath /data/imagenet/ is where dataset "imagenet" is mounted`},
		{"mount over /dev/shm", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[1].VolumeMounts[0].MountPath = "/dev/shm" },
			`worker.template.spec.containers[1].volumeMounts[0].mountPath /dev/shm is the controller's`},
		{"restartPolicy", func(p *corev1.PodTemplateSpec) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
			`worker.template.spec.restartPolicy OnFailure`},
	} {
		rs := checkpointTemplate()
		tc.mutate(&rs.Template)
		_, err := newPlan(templateJob(rs))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// A ps template without parameter servers.
	tj := templateJob(nil)
	tj.Spec.PS = checkpointTemplate()
	if _, err := newPlan(tj); err == nil || !strings.Contains(err.Error(), "ps.template is set but parameterServers is 0") {
		t.Errorf("ps template without ps: %v", err)
	}
}

// TestTemplateAgainstAPIServer: the API server takes the Job a template is
// merged into (it checks the whole pod template), and a template mounting a
// dataset writable fails the job as InvalidSpec naming the field, with
// nothing created.
func TestTemplateAgainstAPIServer(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	ns := e.namespace(t)
	good := templateJob(checkpointTemplate())
	good.Namespace, good.Spec.Gang = ns, &v1alpha1.Gang{Enabled: ptr.To(false)}
	e.node(t, "n1", res("cpu", "16", "memory", "64Gi"), nil)
	if err := e.c.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
	job := e.waitJob(t, ns, "resnet")
	if c := job.Spec.Template.Spec.Containers; len(c) != 2 || c[1].Name != "trainer" || job.Spec.Template.Spec.Volumes[0].Name != "checkpoints" {
		t.Errorf("created Job's pod %+v", job.Spec.Template.Spec)
	}
	rs := checkpointTemplate()
	rs.Template.Spec.Containers[0].VolumeMounts[0].ReadOnly = false
	bad := templateJob(rs)
	bad.Name, bad.Namespace = "writable", ns
	if err := e.c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	got := e.waitPhase(t, ns, "writable", v1alpha1.PhaseFailed, "InvalidSpec")
	if want := "worker.template.spec.containers[0].volumeMounts[0] mounts dataset imagenet writable"; !strings.Contains(got.Status.Message, want) {
		t.Errorf("message %q, want %q", got.Status.Message, want)
	}
	if err := isGone(e.get(t, ns, "writable", job)); err != nil {
		t.Errorf("Job of the refused job: %v", err)
	}
}
