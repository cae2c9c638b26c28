package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epochfs/epochfs/pkg/metrics"
)

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.BuildInfo("csi-driver", "v0.2.0"))
	want := `# HELP epochfs_build_info The running EpochFS binary: always 1, labelled with its name, version and Go version.
# TYPE epochfs_build_info gauge
epochfs_build_info{binary="csi-driver",goversion="` + runtime.Version() + `",version="v0.2.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "epochfs_build_info"); err != nil {
		t.Fatal(err)
	}
}
