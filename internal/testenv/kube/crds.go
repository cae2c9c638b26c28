package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CustomResourceDefinitions in the YAML files at
// paths and waits until each is established and served, or fails the test.
func (k *Server) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		t.Fatalf("kube: dynamic client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var names []string
	for _, p := range paths {
		objs, err := readYAMLObjects(p)
		if err != nil {
			t.Fatalf("kube: %v", err)
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				t.Fatalf("kube: %s: %s %q is not a CustomResourceDefinition", p, o.GetKind(), o.GetName())
			}
			if _, err := dc.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("kube: create CRD %s from %s: %v", o.GetName(), p, err)
			}
			names = append(names, o.GetName())
		}
	}
	for _, name := range names {
		if err := waitEstablished(ctx, dc, name); err != nil {
			t.Fatalf("kube: CRD %s: %v", name, err)
		}
	}
}

func waitEstablished(ctx context.Context, dc dynamic.Interface, name string) error {
	for {
		o, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not established: %w (last get error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readYAMLObjects decodes every non-empty document of a YAML file.
func readYAMLObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}
