package provisioner

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epochfs/epochfs/pkg/volattr"
)

// The StorageClass parameters naming secrets, as external-provisioner
// spells them (prefix volattr.KubernetesPrefix).
const (
	ProvisionerSecretName      = volattr.KubernetesPrefix + "provisioner-secret-name"
	ProvisionerSecretNamespace = volattr.KubernetesPrefix + "provisioner-secret-namespace"
	NodeStageSecretName        = volattr.KubernetesPrefix + "node-stage-secret-name"
	NodeStageSecretNamespace   = volattr.KubernetesPrefix + "node-stage-secret-namespace"
	NodePublishSecretName      = volattr.KubernetesPrefix + "node-publish-secret-name"
	NodePublishSecretNamespace = volattr.KubernetesPrefix + "node-publish-secret-namespace"
)

// unused are reserved keys external-provisioner knows that this driver has
// no use for, with the reason a refusal gives.
var unused = map[string]string{
	"fstype":                              "a dataset volume is a FUSE mount of its own type",
	"controller-publish-secret-name":      "the driver has no attach step",
	"controller-publish-secret-namespace": "the driver has no attach step",
	"controller-expand-secret-name":       "dataset volumes are not expanded",
	"controller-expand-secret-namespace":  "dataset volumes are not expanded",
	"node-expand-secret-name":             "dataset volumes are not expanded",
	"node-expand-secret-namespace":        "dataset volumes are not expanded",
}

// secretParam is one secret reference of a StorageClass: its name and
// namespace, possibly templates; kind names it in errors.
type secretParam struct {
	kind, name, namespace string
}

// parameters are a StorageClass's parameters split into the driver's
// (given to CreateVolume) and the secret references, which are stripped.
type parameters struct {
	driver                              map[string]string
	provisioner, nodeStage, nodePublish secretParam
}

// splitParameters strips the secret keys from in. Any other key under
// csi.storage.k8s.io/ is refused by name: fstype and the attach and expand
// secrets have no use here, and the claim identity keys
// (csi.storage.k8s.io/pvc/name, ...) are the provisioner's to set, not a
// StorageClass's.
func splitParameters(in map[string]string) (parameters, error) {
	p := parameters{driver: map[string]string{},
		provisioner: secretParam{kind: "provisioner"}, nodeStage: secretParam{kind: "node-stage"}, nodePublish: secretParam{kind: "node-publish"}}
	refs := map[string]*string{
		ProvisionerSecretName: &p.provisioner.name, ProvisionerSecretNamespace: &p.provisioner.namespace,
		NodeStageSecretName: &p.nodeStage.name, NodeStageSecretNamespace: &p.nodeStage.namespace,
		NodePublishSecretName: &p.nodePublish.name, NodePublishSecretNamespace: &p.nodePublish.namespace,
	}
	var refused []string
	for k, v := range in {
		if dst, ok := refs[k]; ok {
			*dst = v
			continue
		}
		rest, reserved := strings.CutPrefix(k, volattr.KubernetesPrefix)
		if !reserved {
			p.driver[k] = v
			continue
		}
		if why, ok := unused[rest]; ok {
			refused = append(refused, fmt.Sprintf("%q (%s)", k, why))
		} else {
			refused = append(refused, fmt.Sprintf("%q (not a StorageClass parameter of %s)", k, volattr.DriverName))
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return p, fmt.Errorf("provisioner: StorageClass parameters refused: %s", strings.Join(refused, ", "))
	}
	return p, nil
}

// templateNames are the values of the templates a secret reference may use.
type templateNames struct{ pvName, pvcName, pvcNamespace string }

// resolve expands the reference's templates and checks the names: nil when
// the StorageClass names no such secret. Names may use ${pv.name},
// ${pvc.name} and ${pvc.namespace}, namespaces ${pv.name} and
// ${pvc.namespace}, as external-provisioner's; ${pvc.annotations[...]} and
// any other template are refused.
func (s secretParam) resolve(n templateNames) (*corev1.SecretReference, error) {
	if s.name == "" && s.namespace == "" {
		return nil, nil
	}
	if s.name == "" || s.namespace == "" {
		return nil, fmt.Errorf("provisioner: StorageClass parameters %s-secret-name and %s-secret-namespace go together (one is empty)", s.kind, s.kind)
	}
	name, err := expand(s.kind+"-secret-name", s.name, map[string]string{"pv.name": n.pvName, "pvc.name": n.pvcName, "pvc.namespace": n.pvcNamespace})
	if err != nil {
		return nil, err
	}
	ns, err := expand(s.kind+"-secret-namespace", s.namespace, map[string]string{"pv.name": n.pvName, "pvc.namespace": n.pvcNamespace})
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("provisioner: StorageClass parameter %s-secret-name: %q is not a Secret name: %s", s.kind, name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("provisioner: StorageClass parameter %s-secret-namespace: %q is not a namespace: %s", s.kind, ns, strings.Join(errs, "; "))
	}
	return &corev1.SecretReference{Name: name, Namespace: ns}, nil
}

// expand replaces ${key} in v by vars[key] (os.Expand: the grammar of
// external-provisioner's templates); an unknown key is an error naming it.
func expand(param, v string, vars map[string]string) (string, error) {
	var unknown []string
	out := os.Expand(v, func(key string) string {
		val, ok := vars[key]
		if !ok {
			unknown = append(unknown, "${"+key+"}")
		}
		return val
	})
	if len(unknown) > 0 {
		known := make([]string, 0, len(vars))
		for k := range vars {
			known = append(known, "${"+k+"}")
		}
		sort.Strings(known)
		return "", fmt.Errorf("provisioner: StorageClass parameter %s: template %s not supported (only %s)", param, strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return out, nil
}

// readSecret reads the provisioner secret (nil ref: none). Errors name the
// Secret, never its data.
func (p *Provisioner) readSecret(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := p.client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("provisioner: provisioner secret %s/%s not found", ref.Namespace, ref.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("provisioner: provisioner secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}
