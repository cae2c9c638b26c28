package controller

// The pod-template section of newPlan (plan.go): what a worker's or
// parameter server's template may not do to the pods the controller
// renders.

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// planTemplates checks the worker and parameter-server pod templates
// against the plan so far (datasets, /dev/shm, mode).
func (p *plan) planTemplates(s *v1alpha1.TrainingJobSpec) error {
	if s.PS != nil && s.ParameterServers == 0 {
		return fmt.Errorf("ps.template is set but parameterServers is 0: remove it or add parameter servers")
	}
	for _, rt := range []struct {
		field string
		rs    *v1alpha1.ReplicaSpec
	}{{"worker", s.Worker}, {"ps", s.PS}} {
		if rt.rs != nil {
			if err := p.checkTemplate(rt.field+".template", &rt.rs.Template); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkTemplate refuses what a pod template cannot do to the pods the
// controller renders: use its volume names, mount a dataset writable,
// hide a dataset or /dev/shm in the trainer, restart pods in place.
func (p *plan) checkTemplate(field string, t *corev1.PodTemplateSpec) error {
	own := map[string]string{shmVolume: "/dev/shm", mpiVolume: "the MPI hostfile"}
	claims := map[string]string{} // dataset claim -> dataset
	for _, d := range p.datasets {
		own["dataset-"+d.spec.Name] = "dataset " + d.spec.Name
		claims[d.claimName] = d.spec.Name
	}
	if rp := t.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyNever {
		return fmt.Errorf("%s.spec.restartPolicy %s: the controller's Jobs restart failed pods (backoffLimit): leave it empty or Never", field, rp)
	}
	datasetVolumes := map[string]string{} // template volume -> dataset
	seen := map[string]bool{}
	for i, v := range t.Spec.Volumes {
		f := fmt.Sprintf("%s.spec.volumes[%d]", field, i)
		if what, ok := own[v.Name]; ok {
			return fmt.Errorf("%s.name %q is the controller's volume (%s): rename it", f, v.Name, what)
		}
		if seen[v.Name] {
			return fmt.Errorf("%s.name %q is listed twice", f, v.Name)
		}
		seen[v.Name] = true
		if pvc := v.PersistentVolumeClaim; pvc != nil {
			if d, ok := claims[pvc.ClaimName]; ok {
				if !pvc.ReadOnly {
					return fmt.Errorf("%s mounts the claim %s of dataset %q writable: datasets are read-only; set readOnly: true or leave the mount to the controller", f, pvc.ClaimName, d)
				}
				datasetVolumes[v.Name] = d
			}
		}
	}
	for _, cs := range []struct {
		kind string
		list []corev1.Container
	}{{"initContainers", t.Spec.InitContainers}, {"containers", t.Spec.Containers}} {
		for i, c := range cs.list {
			for j, m := range c.VolumeMounts {
				f := fmt.Sprintf("%s.spec.%s[%d].volumeMounts[%d]", field, cs.kind, i, j)
				if what, ok := own[m.Name]; ok && !seen[m.Name] {
					if strings.HasPrefix(m.Name, "dataset-") && !m.ReadOnly {
						return fmt.Errorf("%s mounts %s writable: datasets are read-only; set readOnly: true", f, what)
					}
					if m.Name == shmVolume && p.shm == nil {
						return fmt.Errorf("%s mounts %s, which shmSize 0 turns off", f, m.Name)
					}
					if m.Name == mpiVolume && p.mode != v1alpha1.ModeMPI {
						return fmt.Errorf("%s mounts %s, which only mode mpi has", f, m.Name)
					}
				}
				if d, ok := datasetVolumes[m.Name]; ok && !m.ReadOnly {
					return fmt.Errorf("%s mounts dataset %q writable: datasets are read-only; set readOnly: true", f, d)
				}
				if c.Name != v1alpha1.ContainerName {
					continue
				}
				for _, d := range p.datasets {
					if path.Clean(m.MountPath) == path.Clean(d.spec.MountPath) {
						return fmt.Errorf("%s.mountPath %s is where dataset %q is mounted: use another path", f, m.MountPath, d.spec.Name)
					}
				}
				if p.shm != nil && path.Clean(m.MountPath) == "/dev/shm" {
					return fmt.Errorf("%s.mountPath /dev/shm is the controller's (shmSize): set shmSize instead, or shmSize: 0 to mount your own", f)
				}
			}
		}
	}
	return nil
}
