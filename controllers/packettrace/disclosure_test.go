package packettrace

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestDisclosureNames: at the Namespace level a trace names the Pods and NetworkPolicies of its own
// namespace and the destination Pod its creator named; those of the destination's namespace by that
// namespace; anything else by its kind alone. At the Cluster level it names everything.
func TestDisclosureNames(t *testing.T) {
	trace := func(level networkv1alpha1.PacketTraceDisclosure, dst networkv1alpha1.PacketTraceDestination) *networkv1alpha1.PacketTrace {
		return &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-x", Name: "t"},
			Spec: networkv1alpha1.PacketTraceSpec{Destination: dst, Disclosure: level}}
	}
	toPod := networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Namespace: "shared", Name: "db"}}
	toIP := networkv1alpha1.PacketTraceDestination{IP: "10.244.2.7"}
	toOwnService := networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Name: "web"}}
	nn := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

	cases := []struct {
		name       string
		tr         *networkv1alpha1.PacketTrace
		podNS, pod string
		wantPod    string
		policy     types.NamespacedName
		rule       string
		wantRef    networkv1alpha1.PolicyRuleReference
		wantPolicy string
	}{
		{"own namespace", trace(networkv1alpha1.PacketTraceDisclosureNamespace, toIP), "tenant-x", "client", "Pod tenant-x/client",
			nn("tenant-x", "allow-web"), "egress[0]", networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "tenant-x", Name: "allow-web", Rule: "egress[0]"}, "NetworkPolicy tenant-x/allow-web"},
		{"an IP destination's Pod and policy of another namespace", trace(networkv1alpha1.PacketTraceDisclosureNamespace, toIP), "default", "pod-b2", "a Pod of another namespace",
			nn("default", "isolate-pod-b2"), "ingress[1]", networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy"}, "a NetworkPolicy of another namespace"},
		{"the isolation of an unnamed namespace's Pod", trace(networkv1alpha1.PacketTraceDisclosureNamespace, toOwnService), "default", "pod-b2", "a Pod of another namespace",
			nn("default", "isolate-pod-b2"), "default deny", networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Rule: "default deny"}, "a NetworkPolicy of another namespace"},
		{"the named destination Pod", trace(networkv1alpha1.PacketTraceDisclosureNamespace, toPod), "shared", "db", "Pod shared/db",
			nn("shared", "db-ingress"), "ingress[0]", networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "shared"}, "a NetworkPolicy of namespace shared"},
		{"another Pod of the named destination's namespace", trace(networkv1alpha1.PacketTraceDisclosureNamespace, toPod), "shared", "cache", "a Pod of namespace shared",
			nn("other", "p"), "ingress[0]", networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy"}, "a NetworkPolicy of another namespace"},
		{"Cluster disclosure", trace(networkv1alpha1.PacketTraceDisclosureCluster, toIP), "default", "pod-b2", "Pod default/pod-b2",
			nn("default", "isolate-pod-b2"), "ingress[1]", networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "default", Name: "isolate-pod-b2", Rule: "ingress[1]"}, "NetworkPolicy default/isolate-pod-b2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			d := disclosureOf(c.tr)
			g.Expect(d.pod(c.podNS, c.pod)).To(Equal(c.wantPod))
			ref, text := d.networkPolicy(c.policy, c.rule)
			g.Expect(*ref).To(Equal(c.wantRef))
			g.Expect(text).To(Equal(c.wantPolicy))
			g.Expect(d.clusterNetworkPolicy()).To(Equal(c.tr.Spec.Disclosure == networkv1alpha1.PacketTraceDisclosureCluster))
		})
	}
}

// TestPrintable: control characters (C0, DEL, C1) never reach an observation, whatever an error or
// an object's text carries.
func TestPrintable(t *testing.T) {
	g := NewWithT(t)
	g.Expect(printable("ok \x1b[2J\x1b]0;pwned\x07 done\u009b31m\n")).To(Equal("ok  [2J ]0;pwned  done 31m "))
	g.Expect(printable("plain: 10.0.0.1:80 (Pod a/b)")).To(Equal("plain: 10.0.0.1:80 (Pod a/b)"))
	long := make([]byte, 600)
	for i := range long {
		long[i] = 'x'
	}
	g.Expect(printable(string(long))).To(HaveLen(512))
}
