package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
)

func init() { logf.SetLogger(logr.Discard()) }

// crdPaths returns the TrainingJob CRD and the named PodGroup test CRDs.
func crdPaths(t testing.TB, podGroups ...string) []string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{filepath.Join(root, "deploy", "crds", "jobs.epochfs.io_trainingjobs.yaml")}
	for _, pg := range podGroups {
		paths = append(paths, filepath.Join(root, "pkg", "job", "testdata", "crds", pg+"-podgroup.yaml"))
	}
	return paths
}

func newScheme(t testing.TB) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// env is a real API server with the controller running against it.
type env struct {
	kube *kube.Server
	c    client.Client // uncached
	now  atomic.Pointer[time.Time]
}

// startEnv starts kube-apiserver with the CRDs and the controller.
func startEnv(t *testing.T, podGroups ...string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	kube := kube.Start(t, crdPaths(t, podGroups...)...)
	return startController(t, kube, kube.Config)
}

// testPolicy is the source policy of the tests' controller: local sources
// under /data (which need not exist: the controller checks names only).
var testPolicy = sourcepolicy.Policy{AllowedLocalRoots: []string{"/data"}}

// startController runs the controller against kube as the identity of
// cfg; the env's client is the cluster admin.
func startController(t *testing.T, kube *kube.Server, cfg *rest.Config) *env {
	t.Helper()
	scheme := newScheme(t)
	e := &env{kube: kube}
	c, err := client.New(kube.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  CacheOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme,
		Recorder:      mgr.GetEventRecorder("job-controller"),
		CapacityRetry: 300 * time.Millisecond,
		SourcePolicy:  testPolicy,

		CacheLocationNamespace: locationNamespace,
		Now: func() time.Time {
			if p := e.now.Load(); p != nil {
				return *p
			}
			return time.Now()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return e
}

var nsSeq atomic.Int32

// namespace creates a fresh namespace.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	if err := e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// node creates a Ready node with the given allocatable resources and
// labels, as a kubelet would register it, and removes the
// node.kubernetes.io/not-ready taint that the TaintNodesByCondition
// admission plugin puts on a new Node, as the node lifecycle controller
// does once the node is Ready.
func (e *env) node(t *testing.T, name string, alloc corev1.ResourceList, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := e.c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) > 0 {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if err := e.c.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	n.Status = corev1.NodeStatus{
		Capacity: alloc, Allocatable: alloc,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}},
	}
	if err := e.c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func res(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// eventually retries fn every 50ms for up to 20s.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = fn(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func (e *env) get(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// waitPhase waits for the TrainingJob's phase and reason and returns it.
func (e *env) waitPhase(t *testing.T, ns, name string, phase v1alpha1.Phase, reason string) *v1alpha1.TrainingJob {
	t.Helper()
	tj := &v1alpha1.TrainingJob{}
	eventually(t, fmt.Sprintf("TrainingJob %s phase %s/%s", name, phase, reason), func() error {
		if err := e.get(t, ns, name, tj); err != nil {
			return err
		}
		if tj.Status.Phase != phase || (reason != "" && tj.Status.Reason != reason) {
			return fmt.Errorf("phase %s/%s: %s", tj.Status.Phase, tj.Status.Reason, tj.Status.Message)
		}
		return nil
	})
	return tj
}

// waitJob waits for the Job the controller creates.
func (e *env) waitJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	j := &batchv1.Job{}
	eventually(t, "Job "+name, func() error { return e.get(t, ns, name, j) })
	return j
}

// setJobStatus plays the Job controller and kubelet: it writes a Job's
// status through the status subresource.
func (e *env) setJobStatus(t *testing.T, ns, name string, mutate func(*batchv1.JobStatus)) {
	t.Helper()
	eventually(t, "update Job status "+name, func() error {
		j := &batchv1.Job{}
		if err := e.get(t, ns, name, j); err != nil {
			return err
		}
		mutate(&j.Status)
		return e.c.Status().Update(context.Background(), j)
	})
}

// pod plays the Job controller and kubelet: it creates pod name of the
// TrainingJob job and, unless phase is empty, writes that phase.
func (e *env) pod(t *testing.T, ns, name, job string, phase corev1.PodPhase) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1alpha1.LabelJobName: job}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "x"}}},
	}
	if err := e.c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if phase == "" {
		return
	}
	p.Status.Phase = phase
	if err := e.c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// completeJob writes the status of a Job whose succeeded pods completed it,
// started and finished now (to the second), and returns that time.
func (e *env) completeJob(t *testing.T, ns, name string, succeeded int32) metav1.Time {
	t.Helper()
	done := metav1.NewTime(time.Now().Truncate(time.Second))
	e.setJobStatus(t, ns, name, func(st *batchv1.JobStatus) {
		st.StartTime, st.Succeeded, st.CompletionTime = &done, succeeded, &done
		st.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: done},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: done},
		}
	})
	return done
}

// succeededJob creates a one-worker TrainingJob (image x) with the datasets
// and cleanup given, and plays the Job controller and the kubelet until it
// has Succeeded: its pod NAME-0-x Succeeded, its Job complete. It returns
// the TrainingJob as created.
func (e *env) succeededJob(t *testing.T, ns, name string, datasets []v1alpha1.Dataset, cleanup v1alpha1.Cleanup) *v1alpha1.TrainingJob {
	t.Helper()
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TrainingJobSpec{Image: "x", Workers: 1, Datasets: datasets, Cleanup: cleanup},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	e.waitJob(t, ns, name)
	e.pod(t, ns, name+"-0-x", name, corev1.PodSucceeded)
	e.completeJob(t, ns, name, 1)
	e.waitPhase(t, ns, name, v1alpha1.PhaseSucceeded, "Succeeded")
	return tj
}

func getUnstructured(e *env, t *testing.T, apiVersion, kind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u, e.get(t, ns, name, u)
}

func isGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("still exists")
	}
	return err
}

func newAdmin(kube *kube.Server) (client.Client, error) {
	return client.New(kube.Config, client.Options{Scheme: clientgoscheme.Scheme})
}
