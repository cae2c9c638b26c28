package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// programName is the program the completion scripts complete: cachefs-job,
// the binary these commands are (`cachefs job` runs it).
const programName = "cachefs-job"

// completionTimeout bounds the API calls of one completion: a shell waits
// for them on every TAB.
const completionTimeout = 5 * time.Second

// newCompletionCmd is cobra's completion command, under `job` because the
// binary's root is only there to name the commands `cachefs job …`. The
// scripts are cobra's; they call `cachefs-job __complete …`, which main
// hands to the root.
func newCompletionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script of " + programName + " (job names come from the API server)",
		Long: `Print the shell completion script of ` + programName + `. For example:

  source <(cachefs-job completion bash)                      # bash, this shell
  cachefs-job completion bash > /etc/bash_completion.d/cachefs-job
  cachefs-job completion zsh > "${fpath[1]}/_cachefs-job"    # zsh (compinit on)
  cachefs-job completion fish > ~/.config/fish/completions/cachefs-job.fish

Names of TrainingJobs complete from the cluster of the kubeconfig flags on
the command line (and its namespace, -n), as with kubectl.`,
		ValidArgs:             []string{"bash", "zsh", "fish", "powershell"},
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := newRoot()
			root.Use = programName
			w := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "fish":
				return root.GenFishCompletion(w, true)
			default:
				return root.GenPowerShellCompletionWithDesc(w)
			}
		},
	}
}

// completionArgs turns the arguments of cachefs-job into the root's: the
// job commands are under `job`, but cobra's completion requests
// (__complete, __completeNoDesc) are the root's.
func completionArgs(args []string) []string {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return append([]string{args[0], "job"}, args[1:]...)
	}
	return append([]string{"job"}, args...)
}

// completeJobNames completes the names of the TrainingJobs of the
// command's namespace; multi commands (delete, suspend, resume) take more
// than one and leave out those already given.
func (f *jobFlags) completeJobNames(multi bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if !multi && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f.completeNames(cmd, v1alpha1.GroupVersion.WithKind("TrainingJobList"), true, toComplete, args)
	}
}

// completeNames lists the objects of a kind (their metadata only; in the
// command's namespace when namespaced) and returns the names that start
// with toComplete, less those in skip, sorted.
func (f *jobFlags) completeNames(cmd *cobra.Command, list schema.GroupVersionKind, namespaced bool, toComplete string, skip []string) ([]cobra.Completion, cobra.ShellCompDirective) {
	jc, err := f.clients()
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmdContext(cmd), completionTimeout)
	defer cancel()
	objs := &metav1.PartialObjectMetadataList{}
	objs.SetGroupVersionKind(list)
	var opts []client.ListOption
	if namespaced {
		opts = append(opts, client.InNamespace(jc.namespace))
	}
	if err := jc.c.List(ctx, objs, opts...); err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, o := range objs.Items {
		if strings.HasPrefix(o.Name, toComplete) && !slices.Contains(skip, o.Name) {
			names = append(names, o.Name)
		}
	}
	sort.Strings(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

// registerKubeCompletions completes -n/--namespace with the cluster's
// namespaces and --context with the kubeconfig's contexts.
func registerKubeCompletions(cmd *cobra.Command, f *jobFlags) {
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return f.completeNames(cmd, corev1.SchemeGroupVersion.WithKind("NamespaceList"), false, toComplete, nil)
	})
	_ = cmd.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		raw, err := f.loader().RawConfig()
		if err != nil {
			cobra.CompErrorln(fmt.Sprintf("kubeconfig: %v", err))
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for name := range raw.Contexts {
			names = append(names, name)
		}
		sort.Strings(names)
		return names, cobra.ShellCompDirectiveNoFileComp
	})
}

func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
