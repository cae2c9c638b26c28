package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// jobFlags are the kubeconfig flags of every `cachefs job` command, kubectl's
// (--kubeconfig, --context, -n/--namespace, --as, --as-group, --as-uid,
// --token, -s/--server, --request-timeout, …).
//
// They are client-go's clientcmd override flags, the ones cli-runtime's
// genericclioptions.ConfigFlags (kubectl's) binds and loads the same way,
// rather than ConfigFlags itself: the genericclioptions package links
// kubectl's resource builder and kustomize, which took bin/cachefs-job from
// 44 MB to 97 MB for the same flags.
type jobFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides

	// now is the clock for ages.
	now func() time.Time
}

// clock is the clock of the commands' ages; tests fix it.
var clock = time.Now

// jobClients are the API clients of one command run.
type jobClients struct {
	c         client.Client
	cs        kubernetes.Interface
	namespace string
	cfg       *rest.Config
}

func newJobCmd() *cobra.Command {
	f := &jobFlags{now: clock}
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Submit and watch distributed training jobs (TrainingJobs) that read EpochFS datasets",
		Long: `cachefs job submits TrainingJobs (jobs.epochfs.io/v1alpha1) to a Kubernetes cluster
running the EpochFS job controller, and lists, inspects, follows and deletes them.

The cluster comes from --kubeconfig, else $KUBECONFIG, else ~/.kube/config;
the other kubeconfig flags are kubectl's (--context, -n/--namespace, --as,
--as-group, --token, --server, --request-timeout, ...) and override the
kubeconfig in the same way. A --token on the command line is visible to
other users of the machine (ps): prefer a kubeconfig.`,
	}
	f.addFlags(cmd.PersistentFlags())
	registerKubeCompletions(cmd, f)
	cmd.AddCommand(newJobSubmitCmd(f), newJobListCmd(f), newJobGetCmd(f), newJobLogsCmd(f), newJobDeleteCmd(f), newJobTopCmd(f),
		newJobSuspendCmd(f, true), newJobSuspendCmd(f, false), newCompletionCmd())
	return cmd
}

func jobScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s) // static registrations: cannot fail
	_ = v1alpha1.AddToScheme(s)
	return s
}

// addFlags binds the kubeconfig flags as kubectl spells them.
func (f *jobFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "path of the kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl
	names.AuthOverrideFlags.Token.Description += " (visible to other users of the machine in ps: prefer a kubeconfig)"
	// Basic authentication is gone from Kubernetes (1.19); kubectl hides
	// these flags too.
	names.AuthOverrideFlags.Username.LongName = ""
	names.AuthOverrideFlags.Password.LongName = ""
	clientcmd.BindOverrideFlags(&f.overrides, fs, names)
}

// loader is the kubeconfig as the flags change it.
func (f *jobFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &f.overrides)
}

// clients loads the kubeconfig and builds the clients.
func (f *jobFlags) clients() (*jobClients, error) {
	loader := f.loader()
	cfg, err := loader.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no cluster: set --kubeconfig or $KUBECONFIG, or create ~/.kube/config")
		}
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// The namespace: -n, else the context's, else default.
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
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
