package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// complete runs a shell's completion request as the scripts send it
// (`cachefs-job __complete ARGS… WORD`, through main's completionArgs)
// and returns the candidates and cobra's directive line.
func complete(t *testing.T, args ...string) (candidates []string, directive string) {
	t.Helper()
	out, _, err := runJob(t, completionArgs(append([]string{"__complete"}, args...))...)
	if err != nil {
		t.Fatalf("__complete %v: %v", args, err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	directive = lines[len(lines)-1]
	if !strings.HasPrefix(directive, ":") {
		t.Fatalf("__complete %v: no directive line in %q", args, out)
	}
	return lines[:len(lines)-1], directive
}

// TestJobCompletion: the names of TrainingJobs complete from the API
// server, in the namespace of -n, and -o, -n and --context complete too.
func TestJobCompletion(t *testing.T) {
	kube, c := startJobKube(t, "ml", "other")
	ctx := context.Background()
	for _, j := range []struct{ ns, name string }{{"ml", "resnet"}, {"ml", "bert"}, {"ml", "roberta"}, {"other", "elsewhere"}} {
		tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: j.ns}, Spec: v1alpha1.TrainingJobSpec{Image: "busybox", Workers: 1}}
		if err := c.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
	}
	kc := "--kubeconfig=" + kube.Kubeconfig
	const noFiles = ":4" // cobra.ShellCompDirectiveNoFileComp
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{kc, "get", "-n", "ml", ""}, "bert resnet roberta"},
		{[]string{kc, "get", "-n", "ml", "r"}, "resnet roberta"},
		{[]string{kc, "-n", "other", "logs", ""}, "elsewhere"},
		{[]string{kc, "get", "-n", "ml", "resnet", ""}, ""}, // one NAME only
		{[]string{kc, "delete", "-n", "ml", "resnet", ""}, "bert roberta"},
		{[]string{kc, "suspend", "-n", "ml", "bert", "r"}, "resnet roberta"},
		{[]string{kc, "resume", "--namespace=other", ""}, "elsewhere"},
		{[]string{kc, "get", "-n", "nosuch", ""}, ""},
		{[]string{kc, "list", "-o", ""}, "json yaml name wide"},
		{[]string{kc, "delete", "x", "-o", ""}, "name"},
		{[]string{kc, "list", "-n", "o"}, "other"},
		{[]string{kc, "list", "--context", ""}, "epochfs-test"},
	} {
		got, directive := complete(t, tc.args...)
		if strings.Join(got, " ") != tc.want || directive != noFiles {
			t.Errorf("__complete %v: %q %s, want %q %s", tc.args, got, directive, tc.want, noFiles)
		}
	}

	// The scripts are cobra's, for the program cachefs-job.
	for shell, want := range map[string]string{
		"bash": "complete -o default -F __start_cachefs-job cachefs-job",
		"zsh":  "#compdef cachefs-job",
		"fish": "complete -c cachefs-job",
	} {
		out, _, err := runJob(t, "job", "completion", shell)
		if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: %v, want a script with %q:\n%.300s", shell, err, want, out)
		}
	}
	if _, _, err := runJob(t, "job", "completion", "tcsh"); err == nil || !strings.Contains(err.Error(), `invalid argument "tcsh"`) {
		t.Errorf("completion tcsh: %v", err)
	}
}

// TestKubeconfigFlags: the kubeconfig flags are kubectl's (cli-runtime's
// ConfigFlags): --server and --token reach the API server as a
// ServiceAccount whose Role allows TrainingJobs in one namespace, --as
// impersonates, and a token never shows in what the command prints.
func TestKubeconfigFlags(t *testing.T) {
	kube, c := startJobKube(t, "ml", "other")
	ctx := context.Background()
	tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "resnet", Namespace: "ml"}, Spec: v1alpha1.TrainingJobSpec{Image: "busybox", Workers: 1}}
	if err := c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "ml"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "jobs-reader", Namespace: "ml"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"trainingjobs"}, Verbs: []string{"get", "list"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "jobs-reader", Namespace: "ml"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "jobs-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: "ml"}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("ml").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	// No kubeconfig at all: the flags say everything.
	empty := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bare := []string{"job", "--kubeconfig", empty, "--server", kube.Host, "--insecure-skip-tls-verify"}
	run := func(args ...string) (string, error) {
		out, stderr, err := runJob(t, append(append([]string{}, bare...), args...)...)
		all := out + stderr
		if err != nil {
			all += err.Error()
		}
		for _, secret := range []string{token, "not-a-valid-token-0123456789"} {
			if strings.Contains(all, secret) {
				t.Errorf("cachefs job %v printed the token:\n%s", args, all)
			}
		}
		return out, err
	}

	out, err := run("--token", token, "list", "-n", "ml", "-o", "name")
	if err != nil || out != "trainingjob.jobs.epochfs.io/resnet\n" {
		t.Errorf("list with --token: %v %q", err, out)
	}
	if _, err := run("--token", token, "list", "-n", "other"); err == nil || !strings.Contains(err.Error(), `User "system:serviceaccount:ml:reader" cannot list resource "trainingjobs"`) {
		t.Errorf("list in another namespace with --token: %v", err)
	}
	if _, err := run("--token", "not-a-valid-token-0123456789", "list", "-n", "ml"); err == nil || !strings.Contains(err.Error(), "the server has asked for the client to provide credentials") {
		t.Errorf("list with a bad --token: %v", err)
	}
	if _, err := run("list", "-n", "ml"); err == nil {
		t.Errorf("list without credentials accepted")
	}
	// --as and --as-group impersonate (the test kubeconfig is an admin's).
	_, _, err = runJob(t, "job", "--kubeconfig", kube.Kubeconfig, "--as", "system:serviceaccount:ml:reader", "--as-group", "team-a", "delete", "resnet", "-n", "ml")
	if err == nil || !strings.Contains(err.Error(), `User "system:serviceaccount:ml:reader" cannot delete resource "trainingjobs"`) {
		t.Errorf("delete --as the reader: %v", err)
	}
	// --request-timeout reaches the client.
	_, _, err = runJob(t, "job", "--kubeconfig", kube.Kubeconfig, "--request-timeout", "1ns", "list", "-n", "ml")
	if err == nil || !strings.Contains(fmt.Sprint(err), "deadline") && !strings.Contains(fmt.Sprint(err), "Timeout") {
		t.Errorf("list --request-timeout 1ns: %v", err)
	}
}
