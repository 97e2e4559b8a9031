package nodenetwork

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestReadyConditionDualStack: a converged node of a dual-stack cluster is Ready (True, reason Ready, not an
// error) and its Ready message names the IPv6 Pod CIDRs it does not realise, once, whatever their order; a
// single-stack node's message does not mention IPv6; a node not converged says what is not ready.
func TestReadyConditionDualStack(t *testing.T) {
	converged := make([]outcome, len(components))
	for i := range converged {
		converged[i] = outcome{networkv1alpha1.ReadyReason, "done"}
	}
	for _, tc := range []struct {
		name     string
		podCIDRs []networkv1alpha1.CIDR
		done     []outcome
		err      error
		status   metav1.ConditionStatus
		message  string
	}{
		{name: "IPv4 only", podCIDRs: []networkv1alpha1.CIDR{"10.244.1.0/24"}, done: converged,
			status: metav1.ConditionTrue, message: "The node network is converged"},
		{name: "dual-stack, IPv6 second", podCIDRs: []networkv1alpha1.CIDR{"10.244.1.0/24", "fd00:10:244:1::/64"}, done: converged,
			status: metav1.ConditionTrue, message: "The node network is converged for IPv4; IPv6 Pod CIDRs [fd00:10:244:1::/64] not realised " +
				"(winnet's Windows data plane is IPv4: the node's Pods get IPv4 addresses only)"},
		{name: "dual-stack, IPv6 first", podCIDRs: []networkv1alpha1.CIDR{"fd00:10:244:1::/64", "10.244.1.0/24"}, done: converged,
			status: metav1.ConditionTrue, message: "The node network is converged for IPv4; IPv6 Pod CIDRs [fd00:10:244:1::/64] not realised " +
				"(winnet's Windows data plane is IPv4: the node's Pods get IPv4 addresses only)"},
		{name: "dual-stack, not converged", podCIDRs: []networkv1alpha1.CIDR{"10.244.1.0/24", "fd00:10:244:1::/64"}, done: converged[:1],
			err: errors.New("no bridge"), status: metav1.ConditionFalse,
			message: "Not ready: BridgeReady, UplinkReady, GatewayReady, TunnelReady, PipelineReady"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			w := &networkv1alpha1.WindowsNodeNetwork{Spec: networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: tc.podCIDRs}}
			setComponentConditions(w, tc.done, tc.err)
			c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Message).To(Equal(tc.message))
			if tc.status == metav1.ConditionTrue {
				g.Expect(c.Reason).To(Equal(networkv1alpha1.ReadyReason))
				for _, other := range w.Status.Conditions {
					if other.Type != networkv1alpha1.ReadyCondition {
						g.Expect(other.Message).NotTo(ContainSubstring("IPv6"), "said once, in Ready: %s", other.Type)
					}
				}
			}
		})
	}
}
