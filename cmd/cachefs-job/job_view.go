package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// listOutputs are the -o values of list and get.
var listOutputs = []string{outJSON, outYAML, outName, outWide}

func newJobListCmd(f *jobFlags) *cobra.Command {
	var all bool
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List training jobs: NAME STATUS MODE WORKERS AGE",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, listOutputs...); err != nil {
				return err
			}
			jc, err := f.clients()
			if err != nil {
				return err
			}
			var list v1alpha1.TrainingJobList
			var opts []client.ListOption
			if !all {
				opts = append(opts, client.InNamespace(jc.namespace))
			}
			if err := jc.c.List(cmd.Context(), &list, opts...); err != nil {
				return apiError(err, "list training jobs")
			}
			sort.Slice(list.Items, func(i, j int) bool {
				a, b := list.Items[i], list.Items[j]
				return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
			})
			jobs := make([]*v1alpha1.TrainingJob, len(list.Items))
			for i := range list.Items {
				jobs[i] = &list.Items[i]
			}
			if len(jobs) == 0 && (output == "" || output == outWide || output == outName) {
				where := "namespace " + jc.namespace
				if all {
					where = "any namespace"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "no training jobs in %s\n", where)
				return nil
			}
			return printJobs(cmd.OutOrStdout(), f.now(), output, "", true, all, jobs...)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the jobs of every namespace")
	outputFlag(cmd, &output, "a table", listOutputs...)
	return cmd
}

func newJobGetCmd(f *jobFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a training job: status, replicas, pods and their nodes, recent events",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeJobNames(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, listOutputs...); err != nil {
				return err
			}
			ctx := cmd.Context()
			jc, tj, err := f.getJob(ctx, args[0])
			if err != nil {
				return err
			}
			if output != "" {
				return printJobs(cmd.OutOrStdout(), f.now(), output, "", false, false, tj)
			}
			var pods corev1.PodList
			if err := jc.c.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels{v1alpha1.LabelJobName: tj.Name}); err != nil {
				return apiError(err, "list pods")
			}
			events, err := jobEvents(ctx, jc, tj)
			if err != nil {
				return err
			}
			return describeJob(cmd.OutOrStdout(), f.now(), tj, pods.Items, events)
		},
	}
	outputFlag(cmd, &output, "a description; wide: the row of list -o wide", listOutputs...)
	return cmd
}

// jobEvents returns the recent events about the TrainingJob, oldest first.
func jobEvents(ctx context.Context, jc *jobClients, tj *v1alpha1.TrainingJob) ([]eventsv1.Event, error) {
	var evs eventsv1.EventList
	if err := jc.c.List(ctx, &evs, client.InNamespace(tj.Namespace)); err != nil {
		return nil, apiError(err, "list events")
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.UID == tj.UID || (e.Regarding.Kind == "TrainingJob" && e.Regarding.Name == tj.Name) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	if len(out) > 10 {
		out = out[len(out)-10:]
	}
	return out, nil
}

func eventTime(e eventsv1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.DeprecatedLastTimestamp.Time
}

func describeJob(w io.Writer, now time.Time, tj *v1alpha1.TrainingJob, pods []corev1.Pod, events []eventsv1.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	describeSummary(tw, now, tj)
	st := tj.Status
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "REPLICAS\tWANTED\tACTIVE\tREADY\tSUCCEEDED\tFAILED")
	fmt.Fprintf(tw, "worker\t%d\t%d\t%d\t%d\t%d\n", tj.Spec.Workers, st.Workers.Active, st.Workers.Ready, st.Workers.Succeeded, st.Workers.Failed)
	if ps := st.ParameterServers; ps != nil || tj.Spec.ParameterServers > 0 {
		if ps == nil {
			ps = &v1alpha1.ReplicaStatus{}
		}
		fmt.Fprintf(tw, "ps\t%d\t%d\t%d\t%d\t%d\n", tj.Spec.ParameterServers, ps.Active, ps.Ready, ps.Succeeded, ps.Failed)
	}
	if tf := tj.Spec.TensorFlow; st.Chief != nil || (tf != nil && tf.Chief) {
		c := st.Chief
		if c == nil {
			c = &v1alpha1.ReplicaStatus{}
		}
		fmt.Fprintf(tw, "chief\t%d\t%d\t%d\t%d\t%d\n", 1, c.Active, c.Ready, c.Succeeded, c.Failed)
	}
	if len(tj.Spec.Datasets) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "DATASET\tSOURCE\tMOUNT")
		for _, d := range tj.Spec.Datasets {
			src := d.Source
			if src == "" {
				src = "claim " + d.ExistingClaim
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Name, src, d.MountPath)
		}
	}
	if len(st.Conditions) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tMESSAGE")
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	describePods(tw, now, pods)
	describeEvents(tw, now, events)
	return tw.Flush()
}

// describeSummary writes the job's name, status, spec and times, one
// "Key:<tab>value" line each.
func describeSummary(tw io.Writer, now time.Time, tj *v1alpha1.TrainingJob) {
	st := tj.Status
	fmt.Fprintf(tw, "Name:\t%s\n", tj.Name)
	fmt.Fprintf(tw, "Namespace:\t%s\n", tj.Namespace)
	fmt.Fprintf(tw, "Status:\t%s\n", orDefault(string(st.Phase), "Pending"))
	if st.Reason != "" || st.Message != "" {
		fmt.Fprintf(tw, "Reason:\t%s: %s\n", st.Reason, st.Message)
	}
	fmt.Fprintf(tw, "Mode:\t%s\n", orDefault(string(tj.Spec.Mode), "standalone"))
	fmt.Fprintf(tw, "Image:\t%s\n", tj.Spec.Image)
	if len(tj.Spec.Command)+len(tj.Spec.Args) > 0 {
		fmt.Fprintf(tw, "Command:\t%s\n", strings.Join(append(slices.Clone(tj.Spec.Command), tj.Spec.Args...), " "))
	}
	if r := describeResources(tj.Spec.Resources); r != "" {
		fmt.Fprintf(tw, "Per worker:\t%s\n", r)
	}
	if tj.Spec.Suspend {
		fmt.Fprintf(tw, "Suspend:\ttrue (no pods run; cachefs job resume %s)\n", tj.Name)
	}
	if tj.Spec.QueueName != "" {
		fmt.Fprintf(tw, "Queue:\t%s (Kueue)\n", tj.Spec.QueueName)
	}
	fmt.Fprintf(tw, "Age:\t%s\n", age(now, tj.CreationTimestamp))
	if st.StartTime != nil {
		fmt.Fprintf(tw, "Started:\t%s\n", st.StartTime.UTC().Format(time.RFC3339))
	}
	if st.CompletionTime != nil {
		fmt.Fprintf(tw, "Finished:\t%s\n", st.CompletionTime.UTC().Format(time.RFC3339))
	}
	if st.Restarts > 0 || tj.Spec.MaxRestarts != nil {
		fmt.Fprintf(tw, "Restarts:\t%d of maxRestarts %d (restarts of the whole gang)\n", st.Restarts, ptr.Deref(tj.Spec.MaxRestarts, 0))
	}
	if f := st.LastFailure; f != nil {
		fmt.Fprintf(tw, "Last failure:\t%s: %s\n", f.Reason, f.Message)
	}
}

// describePods writes the job's pods, by name.
func describePods(tw io.Writer, now time.Time, pods []corev1.Pod) {
	fmt.Fprintln(tw)
	if len(pods) == 0 {
		fmt.Fprintln(tw, "Pods:\t<none>")
	} else {
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		fmt.Fprintln(tw, "POD\tREPLICA\tINDEX\tPHASE\tRESTARTS\tNODE\tAGE")
		for _, p := range pods {
			restarts := int32(0)
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Name, orDefault(p.Labels[v1alpha1.LabelReplica], "-"),
				orDefault(p.Labels[batchCompletionIndex], "-"), orDefault(string(p.Status.Phase), "Pending"), restarts,
				orDefault(p.Spec.NodeName, "<unscheduled>"), age(now, p.CreationTimestamp))
		}
	}
}

// describeEvents writes the job's events.
func describeEvents(tw io.Writer, now time.Time, events []eventsv1.Event) {
	fmt.Fprintln(tw)
	if len(events) == 0 {
		fmt.Fprintln(tw, "Events:\t<none>")
	} else {
		fmt.Fprintln(tw, "LAST SEEN\tTYPE\tREASON\tMESSAGE")
		for _, e := range events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", age(now, metav1.NewTime(eventTime(e))), e.Type, e.Reason, e.Note)
		}
	}
}

const batchCompletionIndex = "batch.kubernetes.io/job-completion-index"

func describeResources(r v1alpha1.WorkerResources) string {
	var parts []string
	if r.CPU != nil {
		parts = append(parts, "cpu "+r.CPU.String())
	}
	if r.Memory != nil {
		parts = append(parts, "memory "+r.Memory.String())
	}
	if r.GPUs > 0 {
		parts = append(parts, strconv.Itoa(int(r.GPUs))+" GPU")
	}
	var extra []string
	for k, v := range r.Extra {
		extra = append(extra, string(k)+" "+v.String())
	}
	sort.Strings(extra)
	return strings.Join(append(parts, extra...), ", ")
}

func newJobTopCmd(f *jobFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top",
		Short: "GPUs allocated and total per node and for the cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			jc, err := f.clients()
			if err != nil {
				return err
			}
			var nodes corev1.NodeList
			if err := jc.c.List(cmd.Context(), &nodes); err != nil {
				return apiError(err, "list nodes")
			}
			var pods corev1.PodList
			if err := jc.c.List(cmd.Context(), &pods); err != nil {
				return apiError(err, "list pods")
			}
			return printTop(cmd.OutOrStdout(), nodes.Items, pods.Items)
		},
	}
	return cmd
}

// printTop prints per node the GPUs requested by unfinished pods against
// the node's allocatable GPUs, its CPU likewise, and the cluster's sums.
func printTop(w io.Writer, nodes []corev1.Node, pods []corev1.Pod) error {
	type usage struct{ gpu, cpu resource.Quantity }
	used := map[string]*usage{}
	jobs := map[string]map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = &usage{}
			used[p.Spec.NodeName] = u
		}
		for _, c := range p.Spec.Containers {
			if q, ok := c.Resources.Requests[v1alpha1.ResourceGPU]; ok {
				u.gpu.Add(q)
			}
			if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
				u.cpu.Add(q)
			}
		}
		if name := p.Labels[v1alpha1.LabelJobName]; name != "" {
			if jobs[p.Spec.NodeName] == nil {
				jobs[p.Spec.NodeName] = map[string]bool{}
			}
			jobs[p.Spec.NodeName][p.Namespace+"/"+name] = true
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tGPU(ALLOC/TOTAL)\tCPU(REQ/ALLOC)\tTRAINING JOBS")
	var gpuUsed, gpuTotal resource.Quantity
	for _, n := range nodes {
		u := used[n.Name]
		if u == nil {
			u = &usage{}
		}
		total := n.Status.Allocatable[v1alpha1.ResourceGPU]
		cpu := n.Status.Allocatable[corev1.ResourceCPU]
		gpuUsed.Add(u.gpu)
		gpuTotal.Add(total)
		status := "NotReady"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
		if n.Spec.Unschedulable {
			status += ",SchedulingDisabled"
		}
		var names []string
		for j := range jobs[n.Name] {
			names = append(names, j)
		}
		sort.Strings(names)
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s/%s\t%s\n", n.Name, status, u.gpu.String(), total.String(),
			u.cpu.String(), cpu.String(), orDefault(strings.Join(names, ","), "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pct := 0.0
	if !gpuTotal.IsZero() {
		pct = 100 * gpuUsed.AsApproximateFloat64() / gpuTotal.AsApproximateFloat64()
	}
	_, err := fmt.Fprintf(w, "\ncluster: %s of %s GPUs allocated (%.0f%%) on %d nodes\n", gpuUsed.String(), gpuTotal.String(), pct, len(nodes))
	return err
}
