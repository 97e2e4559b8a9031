// Package helm tests the Helm chart in config/helm/winnet with a real helm (built by
// hack/setup-test-deps.sh) and a real kube-apiserver: lint, golden rendering, schema rejections,
// installation, and the agent's least privilege.
package helm
