//go:build linux

package networkpolicy_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// nodePortService creates a NodePort Service with one endpoint, p on node: TCP port 80 to tcpPort
// and UDP port 81 to udpPort; it returns the Service as the API server completed it.
func nodePortService(t *testing.T, name string, p *framework.TestPod, node string, tcpPort, udpPort int32) *corev1.Service {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(tcpPort)},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 81, TargetPort: intstr.FromInt32(udpPort)},
		}},
	}
	g.Expect(server.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), svc) })
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: p.Namespace, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(tcpPort)},
			{Name: ptr.To("udp"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(udpPort)},
		},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{p.IP.String()}, NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	g.Expect(server.Client.Create(ctx, slice)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), slice) })
	return svc
}

// exchange sends n datagrams from the namespace to addr on one UDP socket, each waiting for the
// answer of a Serve server, and returns the last answer.
func exchange(t *testing.T, nsName string, addr netip.AddrPort, n int) string {
	t.Helper()
	var c net.Conn
	if err := framework.InNS(nsName, func() error {
		var err error
		c, err = net.Dial("udp4", addr.String())
		return err
	}); err != nil {
		t.Fatalf("dialling %s: %v", addr, err)
	}
	defer c.Close()
	buf := make([]byte, 1500)
	answer := ""
	for i := range n {
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatalf("datagram %d to %s: %v", i+1, addr, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("the answer to datagram %d to %s: %v", i+1, addr, err)
		}
		answer = string(buf[:m])
	}
	return answer
}

// TestRuleCountersServiceSNAT counts the connections that are SNATed to the gateway IP in
// ServiceSNATZone after their DNAT, with every later packet, not their first alone: a Pod reaching
// itself through its Service (hairpin) over TCP (DNATed in the pipeline's zone) and over UDP (DNATed
// in the UDP port's zone of its own). The node reaching its own NodePort, whose endpoint is an
// isolated local Pod, is SNATed in ServiceSNATZone too, and passes as the node's own traffic: the
// Kubernetes specification always admits a Pod's node, and no rule decides (or counts) it.
func TestRuleCountersServiceSNAT(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.84.0/24"))
	address := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := framework.StartPodNodeWith(t, server, u, "ctrs-a", "192.168.84.11/24", "10.244.84.0/24", converge,
		framework.PodNodeOptions{Agent: framework.AgentOptions{MetricsBindAddress: address}})
	a.OVS.ExactMatchDatapath(t)
	reader, err := server.NewMetricsReader(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ctrs-x", Labels: map[string]string{"team": "ctrs-x"}}}
	g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: "ctrs-x", Labels: map[string]string{"app": "web"}})
	serveEcho(t, web.NS, echoPort)
	framework.Serve(t, web.NS, "web", httpPort)
	nodeIP := a.NodeIP.Addr()
	gatewayIP := a.PodCIDR.Addr().Next()

	// A Pod's traffic to itself passes NetworkPolicy unevaluated; an Admin rule decides it first
	// and counts it. The web Pod is isolated for ingress by a NetworkPolicy that admits an address
	// that never connects: the node's own traffic to it passes all the same.
	web2web := []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
		NamespaceSelector: *teamNamespaces("ctrs-x"), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}
	createCNP(t, &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "ctrs-self"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 40,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("ctrs-x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "self-tcp", Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept, Protocols: tcpPort(echoPort), From: web2web},
				{Name: "self-udp", Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept, From: web2web,
					Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{{UDP: &cnpv1beta1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnpv1beta1.Port{Number: httpPort}}}}},
			},
		},
	})
	createPolicy(t, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ctrs-x", Name: "isolate-web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.1/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(echoPort))}},
			}},
		},
	})
	svc := nodePortService(t, "ctrs-web", web, a.Name, echoPort, httpPort)
	vip := netip.MustParseAddr(svc.Spec.ClusterIP)
	tcpVIP, udpVIP := netip.AddrPortFrom(vip, 80), netip.AddrPortFrom(vip, 81)
	nodePort := netip.AddrPortFrom(nodeIP, uint16(svc.Spec.Ports[0].NodePort))
	g.Eventually(func() error { return tryEcho(web.NS, tcpVIP) }).WithTimeout(converge).Should(Succeed())
	g.Eventually(func() error { return tryEcho(a.NS, nodePort) }).WithTimeout(converge).Should(Succeed(),
		"the node reaches its isolated Pod through its own NodePort (the node's traffic is always admitted)")
	g.Eventually(func() (string, error) { return framework.Ask(web.NS, "udp4", udpVIP) }).WithTimeout(converge).
		Should(HavePrefix(fmt.Sprintf("web %s:", gatewayIP)), "hairpin is SNATed to the gateway IP")

	selfTCP := series{"ClusterNetworkPolicy", "", "ctrs-self", "ingress[0]", "ingress", "Accept"}
	selfUDP := series{"ClusterNetworkPolicy", "", "ctrs-self", "ingress[1]", "ingress", "Accept"}
	isolate := series{"NetworkPolicy", "ctrs-x", "isolate-web", "ingress[0]", "ingress", "Allow"}
	fresh := func() counterPage {
		time.Sleep(networkpolicy.CounterCacheTTL + 500*time.Millisecond)
		return scrapeCounters(t, reader, address)
	}
	before := fresh()
	const conns, size, datagrams = 2, 3000, 4
	for range conns {
		talk(t, web.NS, tcpVIP, size)
	}
	g.Expect(exchange(t, web.NS, udpVIP, datagrams)).To(HavePrefix(fmt.Sprintf("web %s:", gatewayIP)))
	for range conns {
		talk(t, a.NS, nodePort, size)
	}
	ct, err := a.OVS.Appctl("dpctl/dump-conntrack")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ct).To(MatchRegexp(fmt.Sprintf(`tcp,orig=\(src=%s,dst=%s,sport=\d+,dport=%d\),reply=\(src=%s,dst=%s,[^\n]*zone=%d`,
		nodeIP, web.IP, echoPort, web.IP, gatewayIP, pipeline.ServiceSNATZone)), "the node's NodePort connection is SNATed in ServiceSNATZone:\n%s", ct)
	after := fresh()
	delta := func(metric string, s series) float64 { return after[metric][s] - before[metric][s] }
	// Every expectation on the counters is checked and reported, not the first failed alone.
	check := NewGomega(func(message string, _ ...int) { t.Helper(); t.Error(message) })

	// Hairpin over TCP: both directions of every connection pass the ingress metric table.
	check.Expect(delta("winnet_policy_rule_connections_total", selfTCP)).To(Equal(float64(conns)), "each connection once")
	check.Expect(delta("winnet_policy_rule_bytes_total", selfTCP)).To(BeNumerically(">=", 2*conns*size), "both directions of what was echoed")
	// Hairpin over UDP, in the port's own zone: every datagram and its answer.
	check.Expect(delta("winnet_policy_rule_connections_total", selfUDP)).To(Equal(1.0))
	check.Expect(delta("winnet_policy_rule_packets_total", selfUDP)).To(Equal(float64(2*datagrams)), "every datagram and every answer")
	// The node's own NodePort: exempt, no rule decided it.
	check.Expect(delta("winnet_policy_rule_connections_total", isolate)).To(BeZero(), "the node's own traffic is no rule's")
	if t.Failed() {
		t.Logf("before: %v\nafter: %v\nconntrack:\n%s", before, after, strings.TrimSpace(ct))
	}
}
