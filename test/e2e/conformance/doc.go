// Package conformance runs Kubernetes' own e2e suite, the stock e2e.test of the Kubernetes version the
// harness runs (hack/setup-kubelet-deps.sh builds it), against a cluster of winnet nodes with real kubelets
// and containerd (test/e2e/cluster's AddKubeletNode): one with Debian's containerd 1.6, one with containerd
// 2.x. By default a small sample of `[sig-network] [Conformance]` tests (make e2e-conformance-sample, part of
// make test); with -conformance.all every `[sig-network] [Conformance]` and `[Feature:NetworkPolicy]` test
// (make conformance-k8s), `[LinuxOnly]` ones included (the Pods are Linux containers; what those tests check of
// the network is winnet's data path); every test left out is in skips.txt with its reason. The tests build only with the tag conformance (go test ./... does not run them).
package conformance
