//go:build !windows

package helm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestChartKeepsTheClusterNetworkPolicyCRD: a cluster that already has the network-policy-api CRD
// (another implementation's, another release's; here the chart's own, marked) keeps it as it is
// when the chart is installed: Helm's crds/ never overwrite.
func TestChartKeepsTheClusterNetworkPolicyCRD(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	server, admin := bareAPIServer(g)
	defer func() { g.Expect(server.Stop()).To(Succeed()) }()

	b, err := os.ReadFile(filepath.Join(chartDir(), "crds", "policy.networking.k8s.io_clusternetworkpolicies.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	existing := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(yaml.Unmarshal(b, existing)).To(Succeed())
	existing.Annotations["policy.networking.k8s.io/bundle-version"] = "v0.0.0-cluster-own"
	existing.Annotations["example.com/owner"] = "another-implementation"
	g.Expect(admin.Create(ctx, existing)).To(Succeed())

	out, stderr, err := runHelm(t, "install", "winnet", chartDir(), "--namespace", ns, "--create-namespace",
		"--kubeconfig", server.KubeconfigPath, "--timeout", "60s")
	g.Expect(err).NotTo(HaveOccurred(), "helm install:\n%s%s", out, stderr)
	got := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: existing.Name}, got)).To(Succeed())
	g.Expect(got.Annotations).To(And(
		HaveKeyWithValue("policy.networking.k8s.io/bundle-version", "v0.0.0-cluster-own"),
		HaveKeyWithValue("example.com/owner", "another-implementation")), "the cluster's CRD is kept")
	g.Expect(got.Labels).NotTo(HaveKey("app.kubernetes.io/managed-by"))
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: "windowsnodenetworks.network.winnet.io"}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed(),
		"winnet's own CRDs are installed")
}
