package cluster

import (
	"fmt"
	"os"

	"github.com/epochfs/epochfs/internal/testenv/kube"
)

// writeClusterConfigs writes containerd's and the kubelet's config files
// and the CNI config (docs/CLUSTER.md explains each setting). containerd's
// registry hosts come from registryHostsDir (hosts.toml files, read at each
// pull): empty but for the test registries (StartRegistry).
func writeClusterConfigs(p clusterPaths, pki *kube.PKI, kubeletPort, kubeletHealthz int) error {
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    restrict_oom_score_adj = true
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %q
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
`, p.join("containerd", "root"), p.join("containerd", "state"), p.containerdSock(),
		p.join("containerd", "opt"), PauseImage, p.registryHostsDir(), p.join("cni", "net.d"), p.join("containerd", "runc"))
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: %q
podLogsDir: %q
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
`, pki.CACert, "unix://"+p.containerdSock(), p.join("pod-logs"), kubeletPort, kubeletHealthz)
	cni := fmt.Sprintf(`{"cniVersion":"0.4.0","name":"epochfs-test","plugins":[
 {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"loopback"}]}
`, cniBridge, p.join("cni", "ipam"))
	for path, data := range map[string]string{
		p.join("containerd", "config.toml"):           containerd,
		p.join("kubelet-config.yaml"):                 kubelet,
		p.join("cni", "net.d", "10-epochfs.conflist"): cni,
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}
