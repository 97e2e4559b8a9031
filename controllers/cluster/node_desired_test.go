package cluster

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestDesiredNodeNetwork(t *testing.T) {
	node := func(lbls map[string]string, cidrs ...string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: lbls},
			Spec:       corev1.NodeSpec{PodCIDRs: cidrs},
			Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.5"}}},
		}
	}
	windows := map[string]string{corev1.LabelOSStable: "windows"}
	pool := labels.SelectorFromSet(labels.Set{"pool": "win"})
	cases := []struct {
		name     string
		node     *corev1.Node
		defaults NetworkDefaults
		wantSpec map[string]any
		wantErr  string
	}{
		{name: "windows node", node: node(windows, "10.244.1.0/24"),
			defaults: NetworkDefaults{ClusterCIDRs: []string{"10.244.0.0/16"}},
			wantSpec: map[string]any{"podCIDRs": []any{"10.244.1.0/24"}, "nodeIP": "192.168.1.5", "clusterCIDRs": []any{"10.244.0.0/16"}}},
		{name: "linux node", node: node(map[string]string{corev1.LabelOSStable: "linux"}, "10.244.1.0/24")},
		{name: "windows node without Pod CIDR", node: node(windows)},
		{name: "custom selector picks its pool", node: node(map[string]string{"pool": "win"}, "10.244.1.0/24"),
			defaults: NetworkDefaults{WindowsNodeSelector: pool},
			wantSpec: map[string]any{"podCIDRs": []any{"10.244.1.0/24"}, "nodeIP": "192.168.1.5"}},
		{name: "custom selector skips plain windows nodes", node: node(windows, "10.244.1.0/24"),
			defaults: NetworkDefaults{WindowsNodeSelector: pool}},
		{name: "IPv6-only node", node: node(windows, "fd00::/64"), wantErr: "no IPv4 Pod CIDR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := desiredNodeNetwork(tc.node, tc.defaults)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.wantSpec == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got.Object["spec"]).To(Equal(tc.wantSpec))
			g.Expect(got.GetLabels()).To(HaveKeyWithValue(ManagedByLabel, ManagedByValue))
			g.Expect(got.GetOwnerReferences()).To(ConsistOf(HaveField("Kind", "Node")))
		})
	}
}

// TestNodeAddressOfADualStackNode: a Node of a dual-stack cluster lists an InternalIP of each family,
// in either order; winnet's tunnels and routes use the IPv4 one. A node with only IPv6 addresses keeps
// one in its route (skew: older releases read it) and gets no nodeIP in its WindowsNodeNetwork, whose
// nodeIP is IPv4 only.
func TestNodeAddressOfADualStackNode(t *testing.T) {
	windows := map[string]string{corev1.LabelOSStable: "windows"}
	node := func(addresses ...string) *corev1.Node {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: windows},
			Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"})
		for _, a := range addresses {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		return n
	}
	for _, tc := range []struct {
		name      string
		addresses []string
		route     string
		wnn       any
	}{
		{"IPv4 first", []string{"192.168.1.5", "fd00::5"}, "192.168.1.5", "192.168.1.5"},
		{"IPv6 first", []string{"fd00::5", "192.168.1.5"}, "192.168.1.5", "192.168.1.5"},
		{"IPv6 only", []string{"fd00::5"}, "fd00::5", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			n := node(tc.addresses...)
			route := desiredRoute(n)
			g.Expect(route).NotTo(BeNil())
			g.Expect(route.Object["spec"]).To(HaveKeyWithValue("nodeIP", tc.route))
			g.Expect(route.Object["spec"]).To(HaveKeyWithValue("podCIDRs", []any{"10.244.1.0/24", "fd00:10:244:1::/64"}), "both families kept")
			wnn, err := desiredNodeNetwork(n, NetworkDefaults{})
			g.Expect(err).NotTo(HaveOccurred())
			if tc.wnn == nil {
				g.Expect(wnn.Object["spec"]).NotTo(HaveKey("nodeIP"))
			} else {
				g.Expect(wnn.Object["spec"]).To(HaveKeyWithValue("nodeIP", tc.wnn))
			}
		})
	}
}
