package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestTrainingJobDocTensorFlow runs the TensorFlow example of docs/JOB.md
// (tf-wide: a chief, workers, parameter servers) on the real cluster. The
// example is taken from the doc by name; only what cannot run here is
// changed: the image (the test-reader image: busybox, no Python or
// TensorFlow), the command (print TF_CONFIG and the hostname, exit 0), the
// resources (no GPUs, a little CPU and memory) and the replica counts (2
// workers, 1 parameter server, to stay fast). Every pod's TF_CONFIG is then
// decoded strictly as TensorFlow's cluster resolver reads it: one cluster,
// the same in every pod, of the chief, worker and ps tasks only; each pod
// one task, no task twice, every task of the cluster taken; each pod's own
// address under its task is its hostname in the headless Service's domain
// at the rendezvous port, and every address is a name cluster DNS would
// resolve (HOSTNAME.SUBDOMAIN of a pod the Service selects, the Service
// headless with that port). The job succeeds when the chief does.
func TestTrainingJobDocTensorFlow(t *testing.T) {
	requireE2E(t)
	tj := &v1alpha1.TrainingJob{}
	if err := yaml.UnmarshalStrict(kube.DocExample(t, "docs/JOB.md", "TrainingJob", "tf-wide"), tj); err != nil {
		t.Fatalf("docs/JOB.md example tf-wide: %v", err)
	}
	if tj.Spec.Mode != v1alpha1.ModeTensorFlow || tj.Spec.ParameterServers == 0 || tj.Spec.TensorFlow == nil || !tj.Spec.TensorFlow.Chief {
		t.Fatalf("the example is no longer a TensorFlow job with a chief and parameter servers: %+v", tj.Spec)
	}
	e := installJobController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const workers, ps = 2, 1
	name := tj.Name
	tj.Namespace = jobNamespace
	tj.Spec.Image, tj.Spec.ImagePullPolicy = e.readerImage, corev1.PullNever
	tj.Spec.Command = []string{"sh", "-c", `echo "TF_CONFIG=$TF_CONFIG"; echo "HOSTNAME=$HOSTNAME"`}
	tj.Spec.Args = nil
	tj.Spec.Resources = v1alpha1.WorkerResources{CPU: ptrQuantity("50m"), Memory: ptrQuantity("64Mi")}
	tj.Spec.Workers, tj.Spec.ParameterServers = workers, ps
	if err := e.tj.Create(ctx, tj); err != nil {
		t.Fatalf("create the example: %v", err)
	}
	done := e.waitPhase(ctx, t, name, v1alpha1.PhaseSucceeded)
	if !strings.Contains(done.Status.Message, "chief succeeded") {
		t.Errorf("succeeded with %q, want the chief to decide", done.Status.Message)
	}
	if c := done.Status.Chief; c == nil || c.Succeeded != 1 {
		t.Errorf("status.chief %+v, want 1 succeeded", c)
	}

	// `cachefs job get` lists the chief among the replicas.
	out := e.mustJob(t, "get", name)
	var chiefRow []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "chief" {
			chiefRow = f
		}
	}
	if !slices.Equal(chiefRow, []string{"chief", "1", "0", "0", "1", "0"}) {
		t.Errorf("cachefs job get: chief row %v, want WANTED 1 SUCCEEDED 1:\n%s", chiefRow, out)
	}

	// Every pod's TF_CONFIG, from `cachefs job logs` (--chief, --ps).
	type podConfig struct {
		what, hostname string
		c              cluster.TFConfig
	}
	var got []podConfig
	read := func(what string, args ...string) {
		out := e.mustJob(t, append([]string{"logs", name}, args...)...)
		var pc podConfig
		pc.what = what
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, "TF_CONFIG="); ok {
				dec := json.NewDecoder(strings.NewReader(v))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&pc.c); err != nil {
					t.Fatalf("%s: TF_CONFIG %q: %v", what, v, err)
				}
			}
			if v, ok := strings.CutPrefix(line, "HOSTNAME="); ok {
				pc.hostname = v
			}
		}
		if pc.c.Cluster == nil || pc.hostname == "" {
			t.Fatalf("%s printed no TF_CONFIG or hostname:\n%s", what, out)
		}
		t.Logf("%s (%s): TF_CONFIG task %s/%d", what, pc.hostname, pc.c.Task.Type, ptrDeref(pc.c.Task.Index))
		got = append(got, pc)
	}
	read("chief", "--chief")
	for i := range workers {
		read("worker "+strconv.Itoa(i), "--worker", strconv.Itoa(i))
	}
	for i := range ps {
		read("ps "+strconv.Itoa(i), "--ps", "--worker", strconv.Itoa(i))
	}

	// The names cluster DNS resolves: HOSTNAME.SUBDOMAIN of each pod that a
	// headless Service named SUBDOMAIN selects, at the Service's ports.
	svc, err := e.c.Client.CoreV1().Services(jobNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q, want headless", name, svc.Spec.ClusterIP)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, strconv.Itoa(int(p.Port)))
	}
	pods, err := e.c.Client.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelJobName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	resolvable := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.Subdomain == svc.Name && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) && p.Spec.Hostname != "" {
			for _, port := range ports {
				resolvable[p.Spec.Hostname+"."+p.Spec.Subdomain+":"+port] = true
			}
		}
		if p.Labels[v1alpha1.LabelReplica] == v1alpha1.ReplicaPS && p.Labels["role"] != "ps" {
			t.Errorf("parameter server %s: labels %v, want the example's ps template label role=ps", p.Name, p.Labels)
		}
	}
	if len(pods.Items) != workers+ps+1 {
		t.Errorf("%d pods, want %d (workers, parameter servers, the chief)", len(pods.Items), workers+ps+1)
	}

	cluster := got[0].c.Cluster
	tasks := map[string]string{}
	for _, pc := range got {
		c := pc.c
		if !reflect.DeepEqual(c.Cluster, cluster) {
			t.Errorf("%s: cluster %v, the chief has %v", pc.what, c.Cluster, cluster)
		}
		if c.Environment != "cloud" {
			t.Errorf("%s: environment %q, want cloud (as tf-operator)", pc.what, c.Environment)
		}
		if c.Task.Index == nil {
			t.Fatalf("%s: task without index", pc.what)
		}
		addrs := c.Cluster[c.Task.Type]
		if *c.Task.Index < 0 || *c.Task.Index >= len(addrs) {
			t.Fatalf("%s: task %s/%d not in cluster %v", pc.what, c.Task.Type, *c.Task.Index, c.Cluster)
		}
		if want := pc.hostname + "." + name + ":" + strconv.Itoa(2222); addrs[*c.Task.Index] != want {
			t.Errorf("%s: its own address %s, want %s (its hostname in the Service's domain)", pc.what, addrs[*c.Task.Index], want)
		}
		key := fmt.Sprintf("%s/%d", c.Task.Type, *c.Task.Index)
		if other, ok := tasks[key]; ok {
			t.Errorf("task %s taken by %s and %s", key, other, pc.what)
		}
		tasks[key] = pc.what
	}
	if tasks["chief/0"] != "chief" {
		t.Errorf("task chief/0 is %q's, want the chief's", tasks["chief/0"])
	}
	n := 0
	for typ, addrs := range cluster {
		if !slices.Contains([]string{"chief", "worker", "ps"}, typ) {
			t.Errorf("cluster has task type %q", typ)
		}
		for i, a := range addrs {
			n++
			if _, ok := tasks[fmt.Sprintf("%s/%d", typ, i)]; !ok {
				t.Errorf("task %s/%d (%s) is no pod's", typ, i, a)
			}
			if !resolvable[a] {
				t.Errorf("%s/%d: %s is not a name cluster DNS resolves (%v)", typ, i, a, resolvable)
			}
		}
	}
	if len(cluster["chief"]) != 1 || len(cluster["worker"]) != workers || len(cluster["ps"]) != ps || n != len(got) {
		t.Errorf("cluster %v: want 1 chief, %d workers, %d ps, one per pod", cluster, workers, ps)
	}
}

func ptrDeref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func ptrQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
