package kube

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epochfs/epochfs/internal/testenv"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.epochfs.io
spec:
  group: test.epochfs.io
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
`

func TestStartKube(t *testing.T) {
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	crd := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(crd, []byte(widgetCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	var host string
	t.Run("running", func(t *testing.T) {
		start := time.Now()
		k := Start(t, crd)
		t.Logf("kube-apiserver + etcd ready with one CRD in %v", time.Since(start).Round(time.Millisecond))
		host = strings.TrimPrefix(k.Host, "https://")
		ctx := context.Background()

		// The kubeconfig file works as well as the rest.Config.
		cfg, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil || !strings.HasPrefix(v.GitVersion, "v1.") {
			t.Fatalf("server version %+v, %v", v, err)
		}

		// The CRD is served.
		dc := dynamic.NewForConfigOrDie(k.Config)
		gvr := schema.GroupVersionResource{Group: "test.epochfs.io", Version: "v1", Resource: "widgets"}
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.epochfs.io/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w1", "namespace": "smoke"},
		}}
		if _, err := dc.Resource(gvr).Namespace("smoke").Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if host == "" {
		return // skipped
	}
	testenv.WaitClosed(t, host, "kube-apiserver")
}

func TestStartKubeMissingBinary(t *testing.T) {
	t.Setenv("EPOCHFS_TOOLS_BIN", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir()) // no repository root: no .tools/bin
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		end := testenv.RunHelper(t, func(tb testing.TB) { Start(tb) })
		if end.Fatal != (ci == "true") || end.Skip == (ci == "true") ||
			!strings.Contains(end.Msg, "kube-apiserver not found: run `make tools`") {
			t.Errorf("CI=%q: fatal=%v skip=%v msg=%q", ci, end.Fatal, end.Skip, end.Msg)
		}
	}
}
