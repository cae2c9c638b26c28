package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestTrainingJobGangRestart runs a 2-worker PyTorch-mode job on the real
// cluster (kubelet, Job controller, garbage collector) whose worker 1 fails
// on the gang's first attempt only (EPOCHFS_ATTEMPT 0, RANK 1: exit 3,
// after a line on stderr) while worker 0 is still running. The whole gang
// restarts: both pods of attempt 0 are deleted before attempt 1's exist;
// attempt 1's workers succeed; status.restarts is 1 and status.lastFailure
// names worker 1, its exit code and the end of its log (the kubelet's
// termination message, FallbackToLogsOnError), which `cachefs job get`
// shows with the Restarting event.
func TestTrainingJobGangRestart(t *testing.T) {
	requireE2E(t)
	e := installJobController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name = "gang"
	// sh as pid 1 ignores SIGTERM: the trap lets worker 0 of attempt 0 go
	// at once when the gang restarts instead of after the grace period.
	script := `echo "attempt $EPOCHFS_ATTEMPT rank $RANK"
if [ "$EPOCHFS_ATTEMPT" = 0 ]; then
  if [ "$RANK" = 1 ]; then sleep 1; echo "rank 1: simulated failure on attempt 0" >&2; exit 3; fi
  trap 'exit 143' TERM; sleep 300 & wait $!
fi`
	e.mustJob(t, "submit", name, "--image", e.readerImage, "--image-pull-policy", "Never",
		"--workers", "2", "--mode", "pytorch", "--cpu", "100m", "--memory", "256Mi", "--max-restarts", "2",
		"--", "sh", "-c", script)

	// Every pod seen, by attempt, and whether both attempts' pods ever
	// existed at once.
	seen := map[string]map[string]bool{}
	overlap := ""
	start := time.Now()
	var lastOld, firstNew time.Duration // since submit: the last look with a pod of attempt 0, the first with one of attempt 1
	poll := func() {
		pods, err := e.c.Client.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelJobName + "=" + name})
		if err != nil {
			return
		}
		now := map[string]bool{}
		for _, p := range pods.Items {
			a := p.Labels[v1alpha1.LabelAttempt]
			if seen[a] == nil {
				seen[a] = map[string]bool{}
			}
			seen[a][p.Name] = true
			now[a] = true
		}
		if now["0"] {
			lastOld = time.Since(start)
		}
		if now["1"] && firstNew == 0 {
			firstNew = time.Since(start)
		}
		if now["0"] && now["1"] && overlap == "" {
			overlap = "pods of attempts 0 and 1 existed at once"
		}
	}
	tj := e.waitPhaseFunc(ctx, t, name, v1alpha1.PhaseSucceeded, poll)
	t.Logf("since submit: last pod of attempt 0 seen at %.1fs, first pod of attempt 1 at %.1fs, Succeeded at %.1fs",
		lastOld.Seconds(), firstNew.Seconds(), time.Since(start).Seconds())
	if overlap != "" {
		t.Error(overlap)
	}
	if len(seen["0"]) == 0 {
		t.Errorf("no pod of attempt 0 was seen: %v", seen)
	}
	// Both workers of attempt 0 are gone; attempt 1's two succeeded.
	pods, err := e.c.Client.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelJobName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, p := range pods.Items {
		if a := p.Labels[v1alpha1.LabelAttempt]; a != "1" {
			t.Errorf("pod %s of attempt %q is left", p.Name, a)
		}
		if p.Status.Phase == corev1.PodSucceeded {
			succeeded++
		}
	}
	if succeeded != 2 {
		t.Errorf("%d pods of attempt 1 succeeded, want 2", succeeded)
	}
	st := tj.Status
	if st.Restarts != 1 || st.Workers.Succeeded != 2 {
		t.Errorf("status: restarts %d, workers %+v; want 1 restart, 2 succeeded", st.Restarts, st.Workers)
	}
	f := st.LastFailure
	if f == nil || f.Attempt != 0 || f.Replica != v1alpha1.ReplicaWorker || f.Index == nil || *f.Index != 1 || f.Reason != "Error" || f.Pod == "" {
		t.Fatalf("lastFailure %+v", f)
	}
	for _, want := range []string{"worker 1 (pod " + f.Pod + ") failed: container trainer exited with code 3 (Error)",
		"its log ends: attempt 0 rank 1 rank 1: simulated failure on attempt 0"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("lastFailure message %q does not contain %q", f.Message, want)
		}
	}
	if want := "all 2 workers succeeded on attempt 1, after 1 restart of the whole gang"; st.Message != want {
		t.Errorf("message %q, want %q", st.Message, want)
	}
	for i := range 2 {
		out := e.mustJob(t, "logs", name, "--worker", strconv.Itoa(i))
		if want := "attempt 1 rank " + strconv.Itoa(i); !strings.HasPrefix(out, want) {
			t.Errorf("worker %d's log %q, want %q", i, out, want)
		}
	}
	out := e.mustJob(t, "get", name)
	t.Logf("cachefs job get %s:\n%s", name, out)
	for _, want := range []string{"Restarts:", "1 of maxRestarts 2", "Last failure:", "Error: attempt 0: worker 1", "Restarting", "Restarted"} {
		if !strings.Contains(out, want) {
			t.Errorf("cachefs job get does not show %q:\n%s", want, out)
		}
	}
}
