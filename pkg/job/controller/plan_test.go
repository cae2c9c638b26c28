package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// TestPlanVolumeAttributes: the plan refuses a dataset whose volume the CSI
// driver would refuse, and what it renders is what volattr.Parse accepted.
func TestPlanVolumeAttributes(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   v1alpha1.Dataset
		want string // error substring; "" for a valid dataset
	}{
		{"valid", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "50Gi", ReadaheadFiles: 8, Prefetch: true}, ""},
		{"bad-source", v1alpha1.Dataset{Name: "d", Source: "ftp://host/x", MountPath: "/d"}, `dataset "d": source "ftp://host/x": `},
		{"bad-size", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "lots"}, `dataset "d": cacheSize "lots"`},
		{"readahead-over-limit", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", ReadaheadFiles: volattr.MaxReadaheadFiles + 1},
			`dataset "d": the CSI driver would refuse its volume: parameter "readaheadFiles"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns"},
				Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 1, Datasets: []v1alpha1.Dataset{tc.ds}}}
			p, err := newPlan(tj)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("newPlan: %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pvs, _ := p.volumes()
			if len(pvs) != 1 {
				t.Fatalf("%d PersistentVolumes, want 1", len(pvs))
			}
			csi := pvs[0].Spec.CSI
			got, err := volattr.Parse(csi.VolumeAttributes, 0)
			if err != nil || csi.Driver != volattr.DriverName {
				t.Fatalf("rendered %s %v: %v", csi.Driver, csi.VolumeAttributes, err)
			}
			if got.CacheSize != 50<<30 || got.ReadaheadFiles != 8 || !got.Prefetch || got.Source != "/data/x" {
				t.Errorf("rendered attributes parse to %+v", got)
			}
		})
	}
}
