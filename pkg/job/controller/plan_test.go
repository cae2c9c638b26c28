package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

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
		{"valid", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "50Gi", ReadaheadFiles: ptr32(8), Prefetch: true}, ""},
		{"readahead-off", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "50Gi", ReadaheadFiles: ptr32(0), Prefetch: true}, ""},
		{"readahead-auto", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "50Gi", Prefetch: true}, ""},
		{"bad-source", v1alpha1.Dataset{Name: "d", Source: "ftp://host/x", MountPath: "/d"}, `dataset "d": source "ftp://host/x": `},
		{"bad-size", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "lots"}, `dataset "d": cacheSize "lots"`},
		{"readahead-over-limit", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", ReadaheadFiles: ptr32(volattr.MaxReadaheadFiles + 1)},
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
			wantRA := tc.ds.ReadaheadFiles // nil: the node's default, auto
			if got.CacheSize != 50<<30 || (got.ReadaheadFiles == nil) != (wantRA == nil) ||
				(wantRA != nil && *got.ReadaheadFiles != int(*wantRA)) || !got.Prefetch || got.Source != "/data/x" {
				t.Errorf("rendered attributes parse to %+v", got)
			}
		})
	}
}

// TestPVName: PersistentVolume names are valid, distinct for tuples whose
// dash-joined spellings collide, and new for a resubmitted job (new UID).
func TestPVName(t *testing.T) {
	tj := func(ns, name, uid string) *v1alpha1.TrainingJob {
		return &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	}
	long := strings.Repeat("n", 63)
	names := map[string]string{}
	for _, tc := range []struct {
		what    string
		tj      *v1alpha1.TrainingJob
		dataset string
	}{
		{"team/a-x d", tj("team", "a-x", "u1"), "d"},
		{"team-a/x d", tj("team-a", "x", "u1"), "d"},
		{"team/a x-d", tj("team", "a", "u1"), "x-d"},
		{"team/a-x d, other uid", tj("team", "a-x", "u2"), "d"},
		{"uid moved into the name", tj("team", "a-x", ""), "du1"},
		{"long", tj(long, strings.Repeat("j", 253), "u1"), strings.Repeat("d", 40)},
	} {
		n := pvName(tc.tj, tc.dataset)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 || !strings.HasPrefix(n, "epochfs-") || len(n) != len("epochfs-")+20 {
			t.Errorf("%s: %q: %v", tc.what, n, errs)
		}
		if other, dup := names[n]; dup {
			t.Errorf("%s and %s share the PersistentVolume name %s", tc.what, other, n)
		}
		names[n] = tc.what
		if again := pvName(tc.tj, tc.dataset); again != n {
			t.Errorf("%s: %s then %s", tc.what, n, again)
		}
	}
}

func ptr32(n int32) *int32 { return &n }
