//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// The datapath side of PacketTrace tenancy: a traced packet reaches no application outside what
// winnet controls, leaves no conntrack entry and no learned flow, and a Pod cannot replay its own
// trace on its node.

// traceConntrack returns the conntrack entries of the node whose original direction has the trace's
// source address and port, as ovs-appctl dpctl/dump-conntrack prints them (every zone).
func traceConntrack(t *testing.T, n *cluster.Node, tr *networkv1alpha1.PacketTrace) []string {
	t.Helper()
	out, err := n.OVS.Appctl("dpctl/dump-conntrack")
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), out)
	orig := fmt.Sprintf("orig=(src=%s,", tr.Status.SourceIP)
	sport := fmt.Sprintf("sport=%d,", tr.Status.SourcePort)
	var entries []string
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, orig); i >= 0 && strings.Contains(l[i:strings.Index(l[i:], ")")+i], sport) {
			entries = append(entries, l)
		}
	}
	return entries
}

// countUDPIn counts the datagrams the network namespace at path receives on each port.
func countUDPIn(t *testing.T, path string, received *atomic.Int32, ports ...int) {
	t.Helper()
	for _, port := range ports {
		conn := listenUDPIn(t, path, port, received)
		t.Cleanup(func() { _ = conn.Close() })
	}
}

// TestPacketTraceOffPathConsumed: a Service's only endpoint is behind a node that runs no winnet agent
// (a RemoteSubnetRoute to the external host, as a flannel Linux node's is: winnet tunnels its Pod CIDR
// there, and the node is not on the trace's path). A trace to the Service from pod-a1 is DNATed on node-a
// and consumed there, before the tunnel, with ForwardedExternally naming the tunnel endpoint; the far
// end receives nothing of it (while a real datagram to the Service arrives there encapsulated), and
// node-a keeps no conntrack entry of the trace's 5-tuple.
func TestPacketTraceOffPathConsumed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const port = 7272
	ghostCIDR := netip.MustParsePrefix("10.244.250.0/24")
	endpoint := netip.MustParseAddr("10.244.250.5")
	route := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "trace-no-agent"},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{NodeName: "trace-no-agent", NodeIP: networkv1alpha1.IPAddress(c.ExternalIP.String()),
			PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(ghostCIDR.String())}, Mode: networkv1alpha1.RouteModeTunnel},
	}
	g.Expect(c.Client.Create(ctx, route)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), route) })
	g.Eventually(node("node-a").Flows).WithTimeout(converge).Should(ContainSubstring("set_field:"+c.ExternalIP.String()+"->tun_dst"),
		"node-a tunnels %s to the node without agent", ghostCIDR)

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-no-agent"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: port, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(port)}}},
	}
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	// The endpoint names no node: the controller puts no node of it into status.nodes (as it will not put a
	// node without a ready agent there).
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-no-agent", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{endpoint.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(port))}},
	}
	g.Expect(c.Client.Create(ctx, slice)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), slice) })
	g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	g.Eventually(node("node-a").Flows).WithTimeout(converge).Should(MatchRegexp(`table=40, .*nw_dst=`+svc.Spec.ClusterIP+`,tp_dst=`+fmt.Sprint(port)+` actions=group:`),
		"node-a balances the Service")

	// The far end: whatever arrives encapsulated from node-a (VXLAN, flannel's VXLAN port, Geneve).
	var received atomic.Int32
	countUDPIn(t, c.External.NSPath, &received, 4789, 8472, 6081)

	tr := runTrace(t, "trace-no-agent", networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Name: svc.Name}},
		networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceUDP, DstPort: port}, "pod-a1")
	g.Consistently(received.Load).WithTimeout(time.Second).Should(BeZero(), "the traced datagram left node-a through the tunnel")
	g.Expect(traceConntrack(t, node("node-a"), tr)).To(BeEmpty(), "conntrack entries of the trace on node-a")
	g.Expect(tr.Status.Phase).To(Equal(networkv1alpha1.PacketTraceSucceeded), hopsText(tr))
	g.Expect(tr.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceForwardedExternally), hopsText(tr))
	g.Expect(tr.Status.Nodes).To(Equal([]string{"node-a"}))
	g.Expect(observations(tr, "node-a")).To(HaveExactElements(
		HavePrefix("Source Injected UDP "+pods["pod-a1"].IP.String()),
		HavePrefix(fmt.Sprintf("ServiceDNAT DNAT to endpoint %s:%d", endpoint, port)),
		fmt.Sprintf("Forwarding ForwardedExternally tunnel to %s: not a node on the trace's path (no winnet agent there): consumed here", c.ExternalIP)), hopsText(tr))

	// The control: a real datagram to the Service takes that tunnel (the first ones may be lost while node-a
	// resolves the far end's MAC).
	g.Eventually(func() int32 {
		sendUDPFrom(t, pods["pod-a1"].NSPath, fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, port))
		return received.Load()
	}).WithTimeout(10*time.Second).WithPolling(200*time.Millisecond).Should(BeNumerically(">=", 1), "a real datagram reaches the far end")
}

// TestPacketTraceServiceLeavesNoState: a trace through a Service with session affinity to an endpoint on
// node-b is DNATed on node-a, tunnelled and delivered, naming the endpoint; neither node keeps a conntrack
// entry of the trace's 5-tuple, and node-a learned no affinity flow for the trace's source Pod (pod-a2's
// real connections, made first, show that it learns them).
func TestPacketTraceServiceLeavesNoState(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ep, err := c.AddPodWith(ctx, node("node-b"), "trace-nostate", cluster.PodOptions{
		Labels: map[string]string{"app": "trace-nostate"}, Ports: echoPorts(8090)}, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), ep) })
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-nostate"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "trace-nostate"}, SessionAffinity: corev1.ServiceAffinityClientIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
	}
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	waitEndpointIPs(t, svc, ep.IP)
	e, err := cluster.ServeNamedEcho(ep.NSPath, "trace-nostate", []int{8090}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer e.Close()
	g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	// The Service works on node-a, and learns its clients' choices (from pod-a2; the trace is pod-a1's).
	askUntilAll(t, pods["pod-a2"].Place(), "tcp4", mustAddrPort(svc.Spec.ClusterIP, 80), pods["pod-a2"].IP, "trace-nostate")
	learned := func(ip netip.Addr) func() (string, error) {
		return func() (string, error) {
			return node("node-a").OVS.Ofctl("dump-flows", cluster.BridgeName, fmt.Sprintf("table=42,ip,nw_src=%s", ip))
		}
	}
	g.Eventually(learned(pods["pod-a2"].IP)).WithTimeout(converge).Should(ContainSubstring("nw_dst="+svc.Spec.ClusterIP), "pod-a2's choice is learned")

	tr := runTrace(t, "trace-nostate", networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Name: svc.Name}}, tcpPacket(80), "pod-a1")
	g.Expect(tr.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceDelivered), hopsText(tr))
	for _, n := range []string{"node-a", "node-b"} {
		g.Expect(traceConntrack(t, node(n), tr)).To(BeEmpty(), "conntrack entries of the trace on %s", n)
	}
	g.Expect(learned(pods["pod-a1"].IP)()).NotTo(ContainSubstring("nw_dst="+svc.Spec.ClusterIP), "an affinity flow learned for the trace")
	g.Expect(tr.Status.Nodes).To(Equal([]string{"node-a", "node-b"}))
	g.Expect(observations(tr, "node-a")).To(HaveExactElements(
		HavePrefix("Source Injected TCP "+pods["pod-a1"].IP.String()),
		HavePrefix("ServiceDNAT DNAT to endpoint "+ep.IP.String()+":8090"),
		HavePrefix("Forwarding Forwarded tunnel to 192.168.77.12")), hopsText(tr))
	g.Expect(observations(tr, "node-b")).To(HaveExactElements(HavePrefix("Output Delivered to "+ep.IP.String()+":8090")), hopsText(tr))
}

// TestPacketTraceNoReplay: while pod-a1's trace to pod-a2 (same node) runs, pod-a1 sends a real datagram with
// the trace's DSCP, source port and destination. It is real traffic on its own node: delivered to pod-a2's
// application, and never reported (node-a's hop holds the injected packet's reports only).
func TestPacketTraceNoReplay(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const port = 7373
	var received atomic.Int32
	conn := listenUDPIn(t, pods["pod-a2"].NSPath, port, &received)
	defer conn.Close()

	tr := &networkv1alpha1.PacketTrace{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-replay"},
		Spec: networkv1alpha1.PacketTraceSpec{
			Source:      networkv1alpha1.PacketTraceSource{Pod: networkv1alpha1.ObjectReference{Name: "pod-a1"}},
			Destination: networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Name: "pod-a2"}},
			Packet:      networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceUDP, DstPort: port}, TimeoutSeconds: 30,
		},
	}
	g.Expect(c.Client.Create(ctx, tr)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), tr) })
	// The trace's flows are on node-a, and its packet is not injected yet (the agent waits for its flows to
	// settle): the deliver flow has seen no packet.
	var deliver string
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(tr), tr)).To(Succeed())
		g.Expect(tr.Status.Phase).To(Equal(networkv1alpha1.PacketTraceRunning))
		out, err := node("node-a").OVS.Ofctl("dump-flows", cluster.BridgeName, fmt.Sprintf("table=105,udp,nw_tos=%d,tp_src=%d", tr.Status.Tag<<2, tr.Status.SourcePort))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("priority=249"))
		deliver = out
	}).WithTimeout(traceTimeout).WithPolling(20 * time.Millisecond).Should(Succeed())
	g.Expect(deliver).To(MatchRegexp(`priority=249,.* n_packets=0|n_packets=0, .*priority=249`), "the trace was injected before the test could replay it:\n%s", deliver)

	sendTaggedUDP(t, pods["pod-a1"].NSPath, int(tr.Status.SourcePort), netip.AddrPortFrom(pods["pod-a2"].IP, port), uint8(tr.Status.Tag))
	g.Eventually(received.Load).WithTimeout(5*time.Second).Should(BeNumerically("==", 1), "pod-a2's application receives the real datagram")

	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(tr), tr)).To(Succeed())
		g.Expect(tr.Status.Phase).To(BeElementOf(networkv1alpha1.PacketTraceSucceeded, networkv1alpha1.PacketTraceFailed))
	}).WithTimeout(traceTimeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(tr.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceDelivered), hopsText(tr))
	g.Expect(observations(tr, "node-a")).To(HaveExactElements(
		HavePrefix("Source Injected UDP "+pods["pod-a1"].IP.String()),
		HavePrefix("Output Delivered to "+pods["pod-a2"].IP.String())), "the real datagram was reported:\n%s", hopsText(tr))
	g.Consistently(received.Load).WithTimeout(500*time.Millisecond).Should(BeNumerically("==", 1), "the traced datagram is consumed")
}

// sendTaggedUDP sends one datagram from the network namespace at path, from source port sport, with DSCP
// tag, as a Pod replaying its trace's packet would.
func sendTaggedUDP(t *testing.T, path string, sport int, dst netip.AddrPort, tag uint8) {
	t.Helper()
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		conn, err := net.DialUDP("udp4", &net.UDPAddr{Port: sport}, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer conn.Close()
		raw, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS, int(tag)<<2)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("setting the DSCP: %w", serr)
		}
		_, err = conn.Write([]byte("replay"))
		return err
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

// TestPacketTraceRouted: without encapsulation (every node NoEncap), a trace from pod-a1 to pod-b1 is routed out
// of node-a's uplink towards node-b, which marks it as it arrives on its uplink (the trace's source is a peer's
// Pod) and delivers it; a trace to an address of a CIDR routed to a host without winnet (no node's Pod CIDR, so
// no node of the path owns it) is consumed on node-a.
func TestPacketTraceRouted(t *testing.T) {
	g := NewWithT(t)
	t.Cleanup(func() { setEncapsulation(t, encapsulations[0]) })
	setEncapsulation(t, encapsulations[2])
	g.Expect(encapsulations[2].spec.Mode).To(Equal(networkv1alpha1.EncapsulationModeNoEncap))
	// A real exchange first: node-a resolves node-b's MAC on the underlay.
	s, err := cluster.ServeEcho(pods["pod-b1"].NSPath, 8080)
	g.Expect(err).NotTo(HaveOccurred())
	defer s.Close()
	cluster.ExpectConnection(t, pods["pod-a1"], pods["pod-b1"], 8080, true, converge)

	tr := runTrace(t, "trace-routed", networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Name: "pod-b1"}}, tcpPacket(8080), "pod-a1")
	g.Expect(tr.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceDelivered), hopsText(tr))
	g.Expect(observations(tr, "node-a")).To(HaveExactElements(
		HavePrefix("Source Injected TCP "+pods["pod-a1"].IP.String()),
		"Forwarding Forwarded routed out of the uplink towards "+pods["pod-b1"].IP.String()), hopsText(tr))
	g.Expect(observations(tr, "node-b")).To(HaveExactElements(HavePrefix("Output Delivered to "+pods["pod-b1"].IP.String()+":8080")), hopsText(tr))
	g.Expect(traceConntrack(t, node("node-a"), tr)).To(BeEmpty(), "conntrack entries of the trace on node-a")

	// A CIDR routed out of the uplink to a host that runs no winnet agent (the external host, as a
	// RemoteSubnetRoute of its own): no node's Pod CIDR holds it, so no node of it is on the path.
	ctx := context.Background()
	route := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "trace-routed-no-agent"},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{NodeName: "trace-routed-no-agent", NodeIP: networkv1alpha1.IPAddress(c.ExternalIP.String()),
			PodCIDRs: []networkv1alpha1.CIDR{"10.244.251.0/24"}, Mode: networkv1alpha1.RouteModeRoute},
	}
	g.Expect(c.Client.Create(ctx, route)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), route) })
	g.Eventually(node("node-a").Flows).WithTimeout(converge).Should(MatchRegexp(`table=70, .*nw_dst=10\.244\.251\.0/24 `),
		"node-a routes the CIDR out of its uplink")
	free := netip.MustParseAddr("10.244.251.5")
	off := runTrace(t, "trace-routed-off", networkv1alpha1.PacketTraceDestination{IP: networkv1alpha1.IPv4Address(free.String())}, tcpPacket(8080), "pod-a1")
	g.Expect(off.Status.Nodes).To(Equal([]string{"node-a"}), "no node's Pod CIDR holds %s", free)
	g.Expect(off.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceForwardedExternally), hopsText(off))
	g.Expect(observations(off, "node-a")).To(HaveExactElements(HavePrefix("Source Injected"),
		"Forwarding ForwardedExternally routed out of the uplink towards "+free.String()+": not a node on the trace's path (no winnet agent there): consumed here"), hopsText(off))
}
