//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// egressIP is an unused address of the underlay, on every winnet node's uplink subnet.
var egressIP = netip.MustParseAddr("192.168.77.150")

// TestEgressLocalPods sends real packets from a Pod an Egress selects and from one it does not, both on
// the Egress's node, to the external host: the external host sees the egress IP as the source of the
// selected Pod's TCP connection (its echo comes back: the connection works both ways) and the node IP as
// the other's; the external host cannot reach the node's host through the egress IP (ICMP to it goes
// unanswered); deleting the Egress returns the Pod to the node's SNAT and takes the IP off the node.
func TestEgressLocalPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := node("node-a")
	selected, err := c.AddPodWith(ctx, a, "egress-a1", cluster.PodOptions{Labels: map[string]string{"egress-test": "selected"}}, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), selected) })
	unselected := pods["pod-a2"]

	// Before any Egress: the node's SNAT, and nothing answers on the egress IP.
	g.Expect(probeSource(ctx, selected.Place())).To(Equal(a.IP))
	_, received, err := cluster.Ping(c.ExternalPlace(), egressIP, 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(received).To(BeZero())

	eg := &networkv1alpha1.Egress{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-egress"},
		Spec: networkv1alpha1.EgressSpec{
			PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"egress-test": "selected"}},
			NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{
				"kubernetes.io/metadata.name": networkv1alpha1.LabelValue(cluster.PodNamespace)}},
			EgressIP: networkv1alpha1.IPv4Address(egressIP.String()),
			// Slice 3 carries only the holder's own Pods: pin the Egress to the selected Pod's node.
			NodeSelector: &networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{corev1.LabelHostname: networkv1alpha1.LabelValue(a.Name)}},
		},
	}
	start := time.Now()
	g.Expect(c.Client.Create(ctx, eg)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), eg) })
	g.Eventually(func(g Gomega) {
		got := &networkv1alpha1.Egress{}
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(eg), got)).To(Succeed())
		g.Expect(got.Status.Node).To(Equal(a.Name))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "Ready: %v", got.Status.Conditions)
	}).WithTimeout(converge).Should(Succeed())
	t.Logf("Egress Ready on %s %v after it was created", a.Name, time.Since(start).Round(time.Millisecond))
	g.Expect(bridgeHolds(a, egressIP)).To(BeTrue(), "the egress IP is on node-a's bridge interface")
	for _, other := range []string{"node-b", "node-c"} {
		g.Expect(bridgeHolds(node(other), egressIP)).To(BeFalse(), "the egress IP is not on %s", other)
	}

	// The selected Pod leaves from the egress IP, the other from the node IP, both ways.
	g.Eventually(func() netip.Addr { return probeSource(ctx, selected.Place()) }).WithTimeout(converge).Should(Equal(egressIP))
	t.Logf("the external host sees %s from %s %v after the Egress was created", egressIP, selected.Name, time.Since(start).Round(time.Millisecond))
	checks := []cluster.Check{
		{From: selected.Place(), To: c.ExternalPlace(), Path: "external, Egress", WantSource: egressIP},
		{From: unselected.Place(), To: c.ExternalPlace(), Path: "external, node SNAT", WantSource: a.IP},
		{From: selected.Place(), To: c.ExcludedPlace(), Path: "external, excluded from SNAT"},
		{From: selected.Place(), To: pods["pod-b1"].Place(), Path: "to a remote Pod, no SNAT"},
	}
	// As the connectivity matrix does: the first packets to a tunnel peer new to the Pod's flows may be
	// lost while ovs-vswitchd resolves the peer; every row must pass once before the counted attempts.
	took, failures, err := c.WaitReachable(ctx, checks, converge)
	g.Expect(err).NotTo(HaveOccurred(), "%s", cluster.Lines(failures))
	t.Logf("every row passed once after %v", took.Round(time.Millisecond))
	results := c.Probe(ctx, checks, 2)
	t.Logf("\n%s", cluster.FormatTable(results))
	for _, r := range results {
		g.Expect(r.OK()).To(BeTrue(), "%s -> %s (%s)", r.From, r.To, r.Path)
	}

	// Nothing but the replies of egress connections reaches the host on the egress IP.
	_, received, err = cluster.Ping(c.ExternalPlace(), egressIP, 2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(received).To(BeZero(), "the external host's ICMP to the egress IP is dropped")

	// NetworkPolicy egress rules still apply at the source: a policy that lets the selected Pod reach only
	// the excluded address cuts its connections through the egress IP, and its removal restores them.
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "egress-only-excluded"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress-test": "selected"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(c.ExcludedIP, 32).String()}}}}},
		},
	}
	g.Expect(c.Client.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), policy) })
	g.Eventually(func() netip.Addr { return probeSource(ctx, selected.Place()) }).WithTimeout(converge).Should(Equal(netip.Addr{}),
		"the policy refuses the selected Pod's connection to the external host")
	g.Expect(c.Probe(ctx, []cluster.Check{{From: selected.Place(), To: c.ExcludedPlace()}}, 1)[0].TCPOK()).To(BeTrue(), "the policy's allowed destination")
	g.Expect(c.Client.Delete(ctx, policy)).To(Succeed())
	g.Eventually(func() netip.Addr { return probeSource(ctx, selected.Place()) }).WithTimeout(converge).Should(Equal(egressIP))

	// The holder's agent restarts (SIGTERM, then a new process) with the selected Pod's traffic running
	// through the egress IP: not one packet is lost, the IP never leaves the bridge interface (the new
	// agent logs no release) and the Pod still leaves from it.
	ping, err := cluster.StartSteadyPing(selected.Place(), c.ExternalIP, 20*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(500 * time.Millisecond)
	oldRound := flowRound(g, a)
	g.Expect(a.RestartAgent()).To(Succeed())
	time.Sleep(3 * time.Second) // the restarted agent resyncs meanwhile
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(flowsOfRound(g, a, oldRound)).To(BeEmpty())
	}).WithTimeout(converge).Should(Succeed(), "flows of the previous agent's round")
	g.Expect(a.Flows()).To(ContainSubstring("nat(src="+egressIP.String()+")"), "the Egress's flows, in the new round")
	stats, err := ping.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("holder's agent restarted; steady ping through the egress IP every 20ms: %v", stats)
	g.Expect(stats.Lost()).To(BeZero(), "packets through the egress IP lost while the holder's agent restarted")
	log, err := os.ReadFile(a.AgentLog())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(log)).NotTo(ContainSubstring("Releasing egress IP"), "the restarted agent never took the egress IP off")
	g.Expect(bridgeHolds(a, egressIP)).To(BeTrue())
	g.Expect(probeSource(ctx, selected.Place())).To(Equal(egressIP))

	// Deleting the Egress returns the Pod to the node's SNAT.
	g.Expect(c.Client.Delete(ctx, eg)).To(Succeed())
	deleted := time.Now()
	g.Eventually(func() netip.Addr { return probeSource(ctx, selected.Place()) }).WithTimeout(converge).Should(Equal(a.IP))
	t.Logf("back to the node's SNAT %v after the Egress was deleted", time.Since(deleted).Round(time.Millisecond))
	g.Eventually(func() bool { return bridgeHolds(a, egressIP) }).WithTimeout(converge).Should(BeFalse(), "the egress IP leaves node-a")

	// An Egress deleted while its holder's agent is stopped: no object names the IP any more, and the
	// next agent takes it off the bridge interface all the same (the record in its state directory).
	again := &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: "e2e-egress-again"}, Spec: *eg.Spec.DeepCopy()}
	g.Expect(c.Client.Create(ctx, again)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), again) })
	g.Eventually(func() bool { return bridgeHolds(a, egressIP) }).WithTimeout(converge).Should(BeTrue(), "node-a holds the egress IP again")
	stoppedRound := flowRound(g, a)
	g.Expect(a.StopAgent(syscall.SIGTERM)).To(Succeed())
	g.Expect(c.Client.Delete(ctx, again)).To(Succeed())
	g.Expect(a.StartAgent()).To(Succeed())
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
	g.Eventually(func() bool { return bridgeHolds(a, egressIP) }).WithTimeout(converge).Should(BeFalse(),
		"the next agent takes off the egress IP of an Egress deleted while no agent ran")
	// The previous agent's round of flows, its Egress SNAT included, goes once every owner of the new
	// round has installed its flows, which may be after the IP left the bridge interface.
	g.Eventually(func() netip.Addr { return probeSource(ctx, selected.Place()) }).WithTimeout(converge).Should(Equal(a.IP),
		func() string { return roundReport(a, stoppedRound, egressIP) })
}

// roundReport says, for a failure, what of node n's previous round of flows is left and what its
// agent logged about the flow owners' reports: which owner had not installed its flows.
func roundReport(n *cluster.Node, round uint16, egressIP netip.Addr) string {
	var b strings.Builder
	lines, err := dumpRound(n, round)
	fmt.Fprintf(&b, "%d flows of the previous round %d (dump error: %v); those with the egress IP:\n", len(lines), round, err)
	for _, l := range lines {
		if strings.Contains(l, egressIP.String()) {
			b.WriteString(l + "\n")
		}
	}
	log, _ := os.ReadFile(n.AgentLog())
	b.WriteString("the agent's log on flow owners and rounds:\n")
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "round") || strings.Contains(l, "flow owner") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// probeSource returns the source address the external host's echo server saw of one TCP connection
// from a place, invalid when the exchange failed.
func probeSource(ctx context.Context, from cluster.Place) netip.Addr {
	r := c.Probe(ctx, []cluster.Check{{From: from, To: c.ExternalPlace()}}, 1)
	if len(r) != 1 {
		return netip.Addr{}
	}
	return r[0].TCPSource
}

// bridgeHolds reports whether the node's bridge interface holds ip.
func bridgeHolds(n *cluster.Node, ip netip.Addr) bool {
	out, err := n.Exec("ip", "-o", "-4", "addr", "show", "dev", cluster.BridgeName)
	if err != nil {
		return false
	}
	return slices.Contains(strings.Fields(out), ip.String()+"/32")
}

// remoteEgressIP is the egress IP of TestEgressRemotePods, apart from TestEgressLocalPods's.
var remoteEgressIP = netip.MustParseAddr("192.168.77.151")

// TestEgressRemotePods sends real packets from Pods an Egress selects on node-a and on node-b, with the
// Egress free to go to any winnet node: the external host sees the egress IP as the source of both
// (the one not on the holder is carried there through the tunnel) and the node IP as the source of an
// unselected Pod; TCP through the holder works both ways; connections a remote selected Pod accepts
// (a NodePort with externalTrafficPolicy Local from the external host, a ClusterIP from another node's
// Pod) still work, their replies never going to the holder; deleting the Egress returns both Pods to
// their node's SNAT.
func TestEgressRemotePods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	selected := map[string]*cluster.Pod{}
	for _, n := range []string{"node-a", "node-b"} {
		name := "egress-r" + strings.TrimPrefix(n, "node-")
		p, err := c.AddPodWith(ctx, node(n), name, cluster.PodOptions{
			Labels: map[string]string{"egress-test": "remote", "egress-echo": name}, Ports: echoPorts(8080)}, readyTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		e, err := cluster.ServeNamedEcho(p.NSPath, name, []int{8080}, []int{8080})
		g.Expect(err).NotTo(HaveOccurred())
		ep := &echoPod{pod: p, echo: e}
		t.Cleanup(func() { ep.remove(t) })
		selected[n] = p
	}
	unselected := pods["pod-a2"]
	for n, p := range selected {
		g.Expect(probeSource(ctx, p.Place())).To(Equal(node(n).IP), "before the Egress, %s leaves from its node's IP", p.Name)
	}

	eg := &networkv1alpha1.Egress{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-egress-remote"},
		Spec: networkv1alpha1.EgressSpec{
			PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"egress-test": "remote"}},
			NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{
				"kubernetes.io/metadata.name": networkv1alpha1.LabelValue(cluster.PodNamespace)}},
			EgressIP: networkv1alpha1.IPv4Address(remoteEgressIP.String()),
		},
	}
	start := time.Now()
	g.Expect(c.Client.Create(ctx, eg)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), eg) })
	var holder string
	g.Eventually(func(g Gomega) {
		got := &networkv1alpha1.Egress{}
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(eg), got)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "Ready: %v", got.Status.Conditions)
		holder = got.Status.Node
	}).WithTimeout(converge).Should(Succeed())
	t.Logf("Egress Ready on %s %v after it was created", holder, time.Since(start).Round(time.Millisecond))
	var remote *cluster.Pod
	for n, p := range selected {
		if n != holder {
			remote = p
		}
	}
	g.Expect(remote).NotTo(BeNil())

	// Both selected Pods leave from the egress IP, whichever node they run on; the unselected from its node's.
	for n, p := range selected {
		g.Eventually(func() netip.Addr { return probeSource(ctx, p.Place()) }).WithTimeout(converge).Should(Equal(remoteEgressIP), "%s on %s", p.Name, n)
		t.Logf("the external host sees %s from %s (on %s, holder %s) %v after the Egress was created", remoteEgressIP, p.Name, n, holder,
			time.Since(start).Round(time.Millisecond))
	}
	checks := []cluster.Check{
		{From: selected["node-a"].Place(), To: c.ExternalPlace(), Path: "external, Egress", WantSource: remoteEgressIP},
		{From: selected["node-b"].Place(), To: c.ExternalPlace(), Path: "external, Egress", WantSource: remoteEgressIP},
		{From: unselected.Place(), To: c.ExternalPlace(), Path: "external, node SNAT", WantSource: node("node-a").IP},
		{From: remote.Place(), To: c.ExcludedPlace(), Path: "external, excluded from SNAT"},
		{From: remote.Place(), To: pods["pod-c1"].Place(), Path: "to a remote Pod, no SNAT"},
	}
	took, failures, err := c.WaitReachable(ctx, checks, converge)
	g.Expect(err).NotTo(HaveOccurred(), "%s", cluster.Lines(failures))
	t.Logf("every row passed once after %v", took.Round(time.Millisecond))
	results := c.Probe(ctx, checks, 2)
	t.Logf("\n%s", cluster.FormatTable(results))
	for _, r := range results {
		g.Expect(r.OK()).To(BeTrue(), "%s -> %s (%s)", r.From, r.To, r.Path)
	}

	// PacketTrace reports the egress hop: the holder's own selected Pod's packet is SNATed to the egress
	// IP there; the other node's is relayed through the tunnel to the holder, which is on the trace's
	// path and reports the SNAT. Only a Cluster-disclosure trace names the Egress (cluster-scoped).
	holderIP := node(holder).IP.String()
	ext := networkv1alpha1.PacketTraceDestination{IP: networkv1alpha1.IPv4Address(c.ExternalIP.String())}
	snat := "Forwarding ForwardedExternally to external address " + c.ExternalIP.String() + ": SNAT to egress IP " + remoteEgressIP.String()
	local := runTrace(t, "trace-egress-local", ext, tcpPacket(8080), selected[holder].Name)
	g.Expect(local.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceForwardedExternally), hopsText(local))
	g.Expect(local.Status.Nodes).To(Equal([]string{holder}), "the source node holds the Egress")
	g.Expect(observations(local, holder)).To(HaveExactElements(HavePrefix("Source Injected"),
		Equal(snat+" (an Egress selects the Pod), out of the uplink (the trace packet is consumed here)")), hopsText(local))
	relayed := runTrace(t, "trace-egress-relayed", ext, tcpPacket(8080), remote.Name)
	g.Expect(relayed.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceForwardedExternally), hopsText(relayed))
	g.Expect(relayed.Status.Nodes).To(Equal([]string{remote.Node, holder}), "the holder is on the trace's path")
	g.Expect(observations(relayed, remote.Node)).To(HaveExactElements(HavePrefix("Source Injected"),
		Equal("Forwarding Forwarded to external address "+c.ExternalIP.String()+": relayed through the tunnel to "+holderIP+
			" (node "+holder+"), which holds the egress IP of the Egress that selects the Pod")), hopsText(relayed))
	g.Expect(observations(relayed, holder)).To(HaveExactElements(HavePrefix(snat+" (an Egress selects the Pod)")), hopsText(relayed))
	named := runTraceAs(t, c.Client, "trace-egress-named", ext, tcpPacket(8080), remote.Name, networkv1alpha1.PacketTraceDisclosureCluster)
	g.Expect(observations(named, holder)).To(HaveExactElements(HavePrefix(snat+" (Egress "+eg.Name+")")), hopsText(named))

	// Connections the remote selected Pod accepts: a NodePort with externalTrafficPolicy Local from the
	// external host (the client's address is kept, the reply leaves the Pod's node to it: it must not go
	// to the holder, which would take it for a new connection and SNAT it), and a ClusterIP from a Pod of
	// another node.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "egress-accepts"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"egress-echo": remote.Name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	waitEndpointIPs(t, svc, remote.IP)
	remoteNode := node(remote.Node)
	nodePort := netip.AddrPortFrom(remoteNode.IP, uint16(svc.Spec.Ports[0].NodePort))
	askUntilAll(t, c.ExternalPlace(), "tcp4", nodePort, netip.Addr{}, remote.Name)
	a, err := cluster.AskEcho(ctx, c.ExternalPlace(), "tcp4", nodePort, askTimeout)
	g.Expect(err).NotTo(HaveOccurred(), "the external host's connection to the NodePort of %s on %s", remote.Name, remoteNode.Name)
	t.Logf("NodePort %s (externalTrafficPolicy Local) answered by %s, which saw the client %s", nodePort, a.Name, a.Client)
	askUntilAll(t, pods["pod-c1"].Place(), "tcp4", netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80), pods["pod-c1"].IP, remote.Name)
	// The external host reaching the Pod's own address, routed to its node: the Pod's replies go to
	// an address outside the cluster, as an opened connection's would, and leave from the Pod's node
	// all the same (only connections the Pod opened carry the relay mark). (A NodePort's replies
	// leave before the Egress's flows: its externalTrafficPolicy Local path above holds without them.)
	podRoute := netip.PrefixFrom(remote.IP, 32).String()
	_, err = c.External.Exec("ip", "route", "replace", podRoute, "via", remoteNode.IP.String())
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _, _ = c.External.Exec("ip", "route", "del", podRoute) })
	direct := netip.AddrPortFrom(remote.IP, 8080)
	askUntilAll(t, c.ExternalPlace(), "tcp4", direct, c.ExternalIP, remote.Name)
	t.Logf("the external host's connection to %s (routed to %s) answered by %s", direct, remoteNode.Name, remote.Name)

	// Deleting the Egress returns both Pods to their node's SNAT.
	g.Expect(c.Client.Delete(ctx, eg)).To(Succeed())
	deleted := time.Now()
	for n, p := range selected {
		g.Eventually(func() netip.Addr { return probeSource(ctx, p.Place()) }).WithTimeout(converge).Should(Equal(node(n).IP), "%s back to %s's SNAT", p.Name, n)
	}
	t.Logf("both Pods back to their node's SNAT %v after the Egress was deleted", time.Since(deleted).Round(time.Millisecond))
	g.Eventually(func() bool { return bridgeHolds(node(holder), remoteEgressIP) }).WithTimeout(converge).Should(BeFalse(), "the egress IP leaves %s", holder)
}
