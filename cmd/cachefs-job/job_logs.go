package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

func newJobLogsCmd(f *jobFlags) *cobra.Command {
	var (
		worker int
		ps     bool
		chief  bool
		follow bool
		tail   int64
	)
	cmd := &cobra.Command{
		Use:               "logs NAME",
		Short:             "Print (or follow) the logs of one worker of a training job",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeJobNames(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			jc, tj, err := f.getJob(ctx, args[0])
			if err != nil {
				return err
			}
			replica, n := v1alpha1.ReplicaWorker, tj.Spec.Workers
			switch {
			case ps && chief:
				return fmt.Errorf("--ps and --chief: choose one")
			case ps:
				replica, n = v1alpha1.ReplicaPS, tj.Spec.ParameterServers
			case chief:
				replica, n = v1alpha1.ReplicaChief, 0
				if tf := tj.Spec.TensorFlow; tf != nil && tf.Chief {
					n = 1
				}
			}
			if worker < 0 || int32(worker) >= n {
				return fmt.Errorf("--worker %d: %s has %d %s replicas (0..%d)", worker, tj.Name, n, replica, n-1)
			}
			var pods corev1.PodList
			if err := jc.c.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels{
				v1alpha1.LabelJobName: tj.Name, v1alpha1.LabelReplica: replica, batchCompletionIndex: strconv.Itoa(worker),
			}); err != nil {
				return apiError(err, "list pods")
			}
			if len(pods.Items) == 0 {
				return fmt.Errorf("%s %d of %s has no pod yet (job %s: %s)", replica, worker, tj.Name,
					orDefault(string(tj.Status.Phase), "Pending"), orDefault(tj.Status.Message, "not started"))
			}
			// The newest pod of the index: earlier ones failed and were replaced.
			sort.Slice(pods.Items, func(i, j int) bool {
				return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp)
			})
			pod := pods.Items[0]
			if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodPending && !started(&pod) {
				return fmt.Errorf("pod %s of %s %d has not started (%s): no logs yet", pod.Name, replica, worker, orDefault(string(pod.Status.Phase), "Pending"))
			}
			opts := &corev1.PodLogOptions{Container: v1alpha1.ContainerName, Follow: follow}
			if tail >= 0 {
				opts.TailLines = &tail
			}
			rc, err := jc.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(ctx)
			if err != nil {
				return fmt.Errorf("logs of pod %s: %w", pod.Name, err)
			}
			defer rc.Close()
			if _, err := io.Copy(cmd.OutOrStdout(), rc); err != nil && !errors.Is(err, ctx.Err()) {
				return fmt.Errorf("logs of pod %s: %w", pod.Name, err)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&worker, "worker", 0, "completion index of the worker (0 is the master in pytorch mode)")
	cmd.Flags().BoolVar(&ps, "ps", false, "a parameter server's logs instead of a worker's (--worker is then its index)")
	cmd.Flags().BoolVar(&chief, "chief", false, "the TensorFlow chief's logs (tensorflow.chief) instead of a worker's")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep streaming new lines")
	cmd.Flags().Int64Var(&tail, "tail", -1, "only the last N lines")
	return cmd
}

func started(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

func newJobDeleteCmd(f *jobFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "delete NAME...",
		Short:             "Delete training jobs with their pods, Jobs, Service, PodGroup and volumes (datasets are never touched)",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: f.completeJobNames(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			// kubectl delete's -o is name only: the object is gone.
			if err := checkOutput(output, outName); err != nil {
				return err
			}
			jc, err := f.clients()
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: jc.namespace, Name: name}}
				if err := jc.c.Delete(cmd.Context(), tj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
					errs = append(errs, apiError(err, "delete "+name))
					continue
				}
				if err := printJobs(cmd.OutOrStdout(), f.now(), outName, operation(output, "deleted"), false, false, tj); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	outputFlag(cmd, &output, "KIND/NAME deleted", outName)
	return cmd
}

// operation is what -o name prints after KIND/NAME: nothing when asked
// for names (-o name, for scripts), else what was done (the default
// output), as kubectl does.
func operation(output, done string) string {
	if output == outName {
		return ""
	}
	return done
}

// newJobSuspendCmd is `cachefs job suspend` (on) and `cachefs job resume`
// (off): a merge patch of spec.suspend, which the controller applies to the
// job's Jobs.
func newJobSuspendCmd(f *jobFlags, on bool) *cobra.Command {
	verb, short := "suspend", "Suspend training jobs: their pods are deleted and none run until resumed"
	if !on {
		verb, short = "resume", "Resume suspended training jobs (once the cluster has room for them)"
	}
	var output string
	cmd := &cobra.Command{
		Use:               verb + " NAME...",
		Short:             short,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: f.completeJobNames(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, listOutputs...); err != nil {
				return err
			}
			jc, err := f.clients()
			if err != nil {
				return err
			}
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, on))
			var errs []error
			var patched []*v1alpha1.TrainingJob
			for _, name := range args {
				tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: jc.namespace, Name: name}}
				if err := jc.c.Patch(cmd.Context(), tj, patch); err != nil {
					errs = append(errs, apiError(err, verb+" "+name))
					continue
				}
				patched = append(patched, tj)
			}
			format := output
			if format == "" {
				format = outName
			}
			if len(patched) > 0 {
				// Several objects in json or yaml make a list, as in kubectl.
				list := len(patched) > 1
				if err := printJobs(cmd.OutOrStdout(), f.now(), format, operation(output, verb+"d"), list, false, patched...); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	outputFlag(cmd, &output, "KIND/NAME "+verb+"d", listOutputs...)
	return cmd
}
