package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/epochfs/epochfs/internal/cliprint"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// The -o values, as kubectl spells them (package cliprint, shared with
// cachefs). Every command that prints TrainingJobs takes those that make
// sense for it (outputFlag).
const (
	outJSON = cliprint.JSON
	outYAML = cliprint.YAML
	outName = cliprint.Name
	outWide = cliprint.Wide
)

// outputFlag adds -o/--output with the values allowed, and their shell
// completion (cliprint.AddFlag).
func outputFlag(cmd *cobra.Command, p *string, what string, allowed ...string) {
	cliprint.AddFlag(cmd, p, what, allowed...)
}

// checkOutput accepts "" (the command's own format) and the allowed ones;
// anything else is a usage error listing them (cliprint.Check).
func checkOutput(format string, allowed ...string) error { return cliprint.Check(format, allowed...) }

// age is how old t is at now, as kubectl prints it (duration.HumanDuration:
// 42s, 5m30s, 3h12m, 2d4h, 400d, 3y20d).
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// forOutput returns a copy of tj as kubectl prints it: with its
// apiVersion and kind (so that the output round-trips through kubectl
// apply -f), without managedFields.
func forOutput(tj *v1alpha1.TrainingJob) *v1alpha1.TrainingJob {
	c := tj.DeepCopy()
	c.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TrainingJob"))
	c.ManagedFields = nil
	return c
}

// printJobs prints TrainingJobs in format through cliprint: json or yaml
// (one object, or a TrainingJobList when list is set), name (kind/name per
// job, followed by operation unless it is empty), wide or "" (the table). A
// TrainingJob from a dry run (no creation time) prints as it is.
func printJobs(w io.Writer, now time.Time, format, operation string, list, withNamespace bool, jobs ...*v1alpha1.TrainingJob) error {
	table := func(w io.Writer, wide bool) error {
		return printers.NewTablePrinter(printers.PrintOptions{Wide: wide, WithNamespace: withNamespace}).
			PrintObj(jobTable(now, jobs), w)
	}
	names := func(tj *v1alpha1.TrainingJob) func() []string {
		return func() []string {
			var b bytes.Buffer
			_ = (&printers.NamePrinter{Operation: operation}).PrintObj(forOutput(tj), &b)
			return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		}
	}
	p := &cliprint.Printer{Format: format}
	if list && (format == outJSON || format == outYAML) {
		l := &v1alpha1.TrainingJobList{}
		l.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("TrainingJobList"))
		l.Items = []v1alpha1.TrainingJob{}
		for _, tj := range jobs {
			l.Items = append(l.Items, *forOutput(tj))
		}
		return p.Print(w, cliprint.Output{Value: l})
	}
	if format == cliprint.Table || format == outWide {
		return p.Print(w, cliprint.Output{Table: table})
	}
	for _, tj := range jobs {
		if err := p.Print(w, cliprint.Output{Value: forOutput(tj), Table: table, Names: names(tj)}); err != nil {
			return err
		}
	}
	return nil
}

// jobTable is the table of `cachefs job list`, built here rather than
// asked of the API server (the CRD's printer columns), so that WORKERS
// reads ready/wanted and ages follow the command's clock. Columns of
// priority 1 are shown with -o wide only.
func jobTable(now time.Time, jobs []*v1alpha1.TrainingJob) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name"},
		{Name: "Status", Type: "string", Description: "the phase"},
		{Name: "Mode", Type: "string"},
		{Name: "Workers", Type: "string", Description: "ready/wanted worker pods"},
		{Name: "Age", Type: "string"},
		{Name: "PS", Type: "string", Priority: 1, Description: "ready/wanted parameter servers"},
		{Name: "Reason", Type: "string", Priority: 1},
		{Name: "Image", Type: "string", Priority: 1},
		{Name: "Datasets", Type: "string", Priority: 1},
	}}
	for _, tj := range jobs {
		ps := "-"
		if tj.Spec.ParameterServers > 0 {
			ready := int32(0)
			if s := tj.Status.ParameterServers; s != nil {
				ready = s.Ready
			}
			ps = fmt.Sprintf("%d/%d", ready, tj.Spec.ParameterServers)
		}
		var ds []string
		for _, d := range tj.Spec.Datasets {
			ds = append(ds, d.Name)
		}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{tj.Name, orDefault(string(tj.Status.Phase), "Pending"), orDefault(string(tj.Spec.Mode), "standalone"),
				fmt.Sprintf("%d/%d", tj.Status.Workers.Ready, tj.Spec.Workers), age(now, tj.CreationTimestamp),
				ps, orDefault(tj.Status.Reason, "-"), tj.Spec.Image, orDefault(strings.Join(ds, ","), "-")},
			Object: runtime.RawExtension{Object: tj},
		})
	}
	return t
}
