//go:build !windows

package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/winnet-io/winnet/test/framework"
)

// TestSamplesAreAccepted creates every object in config/samples: the examples users copy must be valid.
func TestSamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "config", "samples", "network_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found in config/samples (err %v)", err)
	}
	kinds := map[string]int{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			g := NewWithT(t)
			obj := readObject(t, f)
			g.Expect(server.Client.Create(context.Background(), obj)).To(Succeed())
			t.Cleanup(func() { _ = server.Client.Delete(context.Background(), obj) })
			kinds[obj.GetKind()]++
		})
	}
	for _, kind := range []string{"WindowsNodeNetwork", "RemoteSubnetRoute", "PodEndpoint", "FlannelInterop", "Egress"} {
		if kinds[kind] == 0 {
			t.Errorf("config/samples has no %s", kind)
		}
	}
}

// TestValidVariantsAreAccepted covers the valid shapes the samples do not: minimal objects, dual
// stack, every mode.
func TestValidVariantsAreAccepted(t *testing.T) {
	cases := []struct {
		name   string
		base   func(string) *unstructured.Unstructured
		mutate func(*unstructured.Unstructured)
	}{
		{"wnn minimal", validWNN, func(u *unstructured.Unstructured) {
			u.Object["spec"] = map[string]any{"podCIDRs": []any{"10.244.7.0/24"}}
		}},
		{"wnn dual stack", validWNN, all(
			set("spec.podCIDRs", []any{"10.244.1.0/24", "fd00:10:244:1::/64"}),
			set("spec.clusterCIDRs", []any{"10.244.0.0/16", "fd00:10:244::/48"}),
			set("spec.serviceCIDRs", []any{"10.96.0.0/12", "fd00:10:96::/108"}))},
		{"wnn NoEncap geneve", validWNN, all(set("spec.encapsulation.mode", "NoEncap"), set("spec.encapsulation.tunnelType", "geneve"))},
		{"wnn SNAT off", validWNN, set("spec.snat.enabled", false)},
		{"wnn last address as gateway", validWNN, set("spec.gateway.ip", "10.244.1.254")},
		{"rsr minimal", validRSR, func(u *unstructured.Unstructured) {
			u.Object["spec"] = map[string]any{"podCIDRs": []any{"10.244.3.0/24"}, "nodeIP": "192.168.10.21"}
		}},
		{"rsr Route mode", validRSR, all(set("spec.mode", "Route"), del("spec.vni"), del("spec.vtepMAC"))},
		{"rsr IPv6 underlay tunnel", validRSR, set("spec.nodeIP", "fd00::21")},
		{"rsr dual stack", validRSR, set("spec.podCIDRs", []any{"10.244.3.0/24", "fd00:10:244:3::/64"})},
		{"pep dual stack", validPEP, set("spec.ips", []any{"10.244.1.5/24", "fd00:10:244:1::5/64"})},
		{"pep without gateway", validPEP, del("spec.gateway")},
		{"pep of an earlier agent, named after its Pod", legacyPEP, func(*unstructured.Unstructured) {}},
		{"wnn own vtepMAC", validWNN, set("spec.encapsulation.vtepMAC", "0e:6a:5e:1b:23:9c")},
		{"fi VNI 1 (Linux-only flannel)", validFI, set("spec.vni", int64(1))},
		{"fi custom annotation prefix", validFI, set("spec.annotationPrefix", "flannel.example.com")},
		{"egress selecting every Pod of every namespace on purpose, any node", validEgress, all(set("spec.podSelector", map[string]any{}),
			set("spec.namespaceSelector", map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/metadata.name", "operator": "Exists"}}}), del("spec.nodeSelector"))},
		{"egress prefixed keys, DoesNotExist", validEgress, set("spec.podSelector", map[string]any{
			"matchLabels":      map[string]any{"example.com/tier": "", "app.kubernetes.io/name": "a.b_c-d"},
			"matchExpressions": []any{map[string]any{"key": "canary", "operator": "DoesNotExist"}},
		})},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := tc.base(fmt.Sprintf("valid-%02d", i))
			tc.mutate(obj)
			g.Expect(server.Client.Create(context.Background(), obj)).To(Succeed())
			g.Expect(server.Client.Delete(context.Background(), obj)).To(Succeed())
		})
	}
}

func readObject(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return obj
}
