// Package framework starts the real parts winnet's tests run against: a kube-apiserver and etcd
// (envtest, with binaries built by hack/setup-test-deps.sh) with winnet's CRDs installed.
package framework
