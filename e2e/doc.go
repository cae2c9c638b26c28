// Package e2e holds EpochFS's end-to-end tests: the project's images run in
// a real containerd and the CSI driver registered with a real kubelet
// (internal/testenv's single-node cluster). They run with EPOCHFS_E2E=1
// (`make test`, `make e2e`) and always under CI=true (testenv.RequireE2E),
// and need root, `make cluster-tools` and `make images`; without them they
// skip, or fail under CI=true.
//
// The package has no code of its own beyond the tests.
package e2e
