package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// jobFlags are the kubeconfig flags of every `cachefs job` command, in
// kubectl's spelling.
type jobFlags struct {
	kubeconfig string
	context    string
	namespace  string

	// now is the clock for ages; tests replace it.
	now func() time.Time
}

// jobClients are the API clients of one command run.
type jobClients struct {
	c         client.Client
	cs        kubernetes.Interface
	namespace string
	cfg       *rest.Config
}

func newJobCmd() *cobra.Command {
	f := &jobFlags{now: time.Now}
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Submit and watch distributed training jobs (TrainingJobs) that read EpochFS datasets",
		Long: `cachefs job submits TrainingJobs (jobs.epochfs.io/v1alpha1) to a Kubernetes cluster
running the EpochFS job controller, and lists, inspects, follows and deletes them.

The cluster comes from --kubeconfig, else $KUBECONFIG, else ~/.kube/config;
--context and -n/--namespace override the kubeconfig's current context and
namespace, as in kubectl.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	pf.StringVar(&f.context, "context", "", "kubeconfig context to use (default: the current context)")
	pf.StringVarP(&f.namespace, "namespace", "n", "", "namespace (default: the context's namespace, else default)")
	cmd.AddCommand(newJobSubmitCmd(f), newJobListCmd(f), newJobGetCmd(f), newJobLogsCmd(f), newJobDeleteCmd(f), newJobTopCmd(f),
		newJobSuspendCmd(f, true), newJobSuspendCmd(f, false))
	return cmd
}

func jobScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s) // static registrations: cannot fail
	_ = v1alpha1.AddToScheme(s)
	return s
}

// clients loads the kubeconfig and builds the clients.
func (f *jobFlags) clients() (*jobClients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no cluster: set --kubeconfig or $KUBECONFIG, or create ~/.kube/config")
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns := f.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: jobScheme()})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Host, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &jobClients{c: c, cs: cs, namespace: ns, cfg: cfg}, nil
}

// getJob connects and reads the TrainingJob name in the command's
// namespace.
func (f *jobFlags) getJob(ctx context.Context, name string) (*jobClients, *v1alpha1.TrainingJob, error) {
	jc, err := f.clients()
	if err != nil {
		return nil, nil, err
	}
	tj := &v1alpha1.TrainingJob{}
	if err := jc.c.Get(ctx, client.ObjectKey{Namespace: jc.namespace, Name: name}, tj); err != nil {
		return nil, nil, apiError(err, "get "+name)
	}
	return jc, tj, nil
}

// apiError turns the errors a user can act on into one clear sentence.
func apiError(err error, what string) error {
	if err == nil {
		return nil
	}
	if meta.IsNoMatchError(err) || strings.Contains(err.Error(), "the server could not find the requested resource") {
		return errors.New("the TrainingJob CRD is not installed in this cluster: kubectl apply -f deploy/crds/ and deploy the job controller (deploy/)")
	}
	return fmt.Errorf("%s: %w", what, err)
}

// printObject writes obj as YAML or JSON with its apiVersion and kind, and
// without managedFields.
func printObject(w io.Writer, obj runtime.Object, format string) error {
	obj = obj.DeepCopyObject()
	if gvks, _, err := jobScheme().ObjectKinds(obj); err == nil && len(gvks) > 0 {
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	if l, ok := obj.(*v1alpha1.TrainingJobList); ok {
		for i := range l.Items {
			l.Items[i].APIVersion, l.Items[i].Kind = v1alpha1.GroupVersion.String(), "TrainingJob"
			l.Items[i].ManagedFields = nil
		}
	}
	switch format {
	case "yaml":
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "json":
		b, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return fmt.Errorf("-o %q: want yaml or json", format)
}

// checkOutput accepts "" (the command's own format) and the allowed ones.
func checkOutput(format string, allowed ...string) error {
	if format == "" {
		return nil
	}
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return fmt.Errorf("-o %q: want %s", format, strings.Join(allowed, " or "))
}

// age formats a duration as kubectl does: 42s, 5m, 3h, 2d.
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	d := now.Sub(t.Time)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
