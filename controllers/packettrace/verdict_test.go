package packettrace

import (
	"slices"
	"testing"

	. "github.com/onsi/gomega"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

func obs(action string) networkv1alpha1.PacketTraceObservation {
	return networkv1alpha1.PacketTraceObservation{Component: "X", Action: action}
}

// TestVerdict: the verdict waits for every node that reported to say where the packet left it.
func TestVerdict(t *testing.T) {
	policy := &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "ns", Name: "deny", Rule: "default deny"}
	dropped := obs(networkv1alpha1.PacketTraceActionDropped)
	dropped.Policy = policy
	for _, tc := range []struct {
		name string
		hops []networkv1alpha1.PacketTraceHop
		want networkv1alpha1.PacketTraceVerdict
		done bool
	}{
		{"nothing yet", nil, "", false},
		{"only acknowledged", []networkv1alpha1.PacketTraceHop{{Node: "a"}, {Node: "b"}}, "", false},
		{"delivered", []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected"), obs("Forwarded")}},
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Delivered")}}}, networkv1alpha1.PacketTraceDelivered, true},
		{"the end is known but the source has only acknowledged", []networkv1alpha1.PacketTraceHop{
			{Node: "a"},
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Delivered")}}}, "", false},
		{"the end is known but the source's hop is not written", []networkv1alpha1.PacketTraceHop{
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Delivered")}}}, "", false},
		{"the end is known but the source's DNAT and forwarding are still on their way", []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected")}},
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Delivered")}}}, "", false},
		{"dropped", []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected"), obs("Forwarded")}},
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Admitted"), dropped}}}, networkv1alpha1.PacketTraceDropped, true},
		{"external", []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected"), obs("ForwardedExternally")}}}, networkv1alpha1.PacketTraceForwardedExternally, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			v, by, done := Verdict(tc.hops, "a")
			g.Expect(done).To(Equal(tc.done))
			g.Expect(v).To(Equal(tc.want))
			if tc.want == networkv1alpha1.PacketTraceDropped {
				g.Expect(by).To(Equal(policy))
			}
		})
	}
}

// TestSummary: the message names a NetworkPolicy with its namespace, a ClusterNetworkPolicy without.
func TestSummary(t *testing.T) {
	g := NewWithT(t)
	g.Expect(summary(networkv1alpha1.PacketTraceDropped, &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "ns", Name: "deny", Rule: "default deny"})).
		To(Equal("Dropped by NetworkPolicy ns/deny default deny"))
	g.Expect(summary(networkv1alpha1.PacketTraceDropped, &networkv1alpha1.PolicyRuleReference{Kind: "ClusterNetworkPolicy", Name: "no-metadata", Rule: "egress[0]"})).
		To(Equal("Dropped by ClusterNetworkPolicy no-metadata egress[0]"))
	g.Expect(summary(networkv1alpha1.PacketTraceDelivered, nil)).To(Equal("Delivered"))
}

// TestPathVerdict: only the hops of the source node and status.nodes count. Any agent may write its
// own node's hop into any trace: a node the packet was not sent to can neither decide the verdict
// (a forged Dropped or Delivered) nor hold it back (a hop that never ends).
func TestPathVerdict(t *testing.T) {
	forged := obs(networkv1alpha1.PacketTraceActionDropped)
	forged.Policy = &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "other", Name: "forged"}
	delivered := []networkv1alpha1.PacketTraceHop{
		{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected"), obs("Forwarded")}},
		{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Delivered")}}}
	for _, tc := range []struct {
		name string
		hops []networkv1alpha1.PacketTraceHop
		want networkv1alpha1.PacketTraceVerdict
		done bool
	}{
		{"on the path only", delivered, networkv1alpha1.PacketTraceDelivered, true},
		{"a forged drop by a node off the path", append([]networkv1alpha1.PacketTraceHop{
			{Node: "x", Observations: []networkv1alpha1.PacketTraceObservation{forged}}}, delivered...), networkv1alpha1.PacketTraceDelivered, true},
		{"a node off the path that never ends its hop", append(slices.Clone(delivered),
			networkv1alpha1.PacketTraceHop{Node: "x", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected")}}), networkv1alpha1.PacketTraceDelivered, true},
		{"a forged delivery by a node off the path while the path has not ended", []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected"), obs("Forwarded")}},
			{Node: "x", Observations: []networkv1alpha1.PacketTraceObservation{obs("Delivered")}}}, "", false},
		{"a drop on the path", []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{obs("Injected"), obs("Forwarded")}},
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{obs("Admitted"), obs("Dropped")}}}, networkv1alpha1.PacketTraceDropped, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := &networkv1alpha1.PacketTraceStatus{SourceNode: "a", Nodes: []string{"a", "b"}, Hops: tc.hops}
			v, by, done := PathVerdict(st)
			g.Expect(done).To(Equal(tc.done))
			g.Expect(v).To(Equal(tc.want))
			g.Expect(by).To(BeNil(), "no policy of a node off the path")
		})
	}
	g := NewWithT(t)
	st := &networkv1alpha1.PacketTraceStatus{SourceNode: "a", Nodes: []string{"b"}, Hops: append(slices.Clone(delivered), networkv1alpha1.PacketTraceHop{Node: "x"})}
	g.Expect(HopsOnPath(st)).To(Equal(delivered), "the source node is on the path even when status.nodes leaves it out")
}

// TestSummaryRedacted: a trace's message names the policy that dropped its packet as far as its observations
// do: by name, by namespace alone (redacted to the trace's disclosure), or by kind alone.
func TestSummaryRedacted(t *testing.T) {
	g := NewWithT(t)
	dropped := networkv1alpha1.PacketTraceDropped
	g.Expect(summary(networkv1alpha1.PacketTraceDelivered, nil)).To(Equal("Delivered"))
	g.Expect(summary(dropped, &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "ns", Name: "deny", Rule: "default deny"})).
		To(Equal("Dropped by NetworkPolicy ns/deny default deny"))
	g.Expect(summary(dropped, &networkv1alpha1.PolicyRuleReference{Kind: "ClusterNetworkPolicy", Name: "admin", Rule: "ingress[0]"})).
		To(Equal("Dropped by ClusterNetworkPolicy admin ingress[0]"))
	g.Expect(summary(dropped, &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "shared", Rule: "default deny"})).
		To(Equal("Dropped by a NetworkPolicy of namespace shared default deny"))
	g.Expect(summary(dropped, &networkv1alpha1.PolicyRuleReference{Kind: "ClusterNetworkPolicy"})).
		To(Equal("Dropped by a ClusterNetworkPolicy (not named: the trace's disclosure is Namespace)"))
}
