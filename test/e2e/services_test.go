//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// The Services tests run with the real kube-controller-manager (EndpointSlices from Pods and Services), the
// real CoreDNS as kube-dns and the kubernetes Service whose endpoint is the real API server; the echo servers
// answer with their name and the client address they saw.

const askTimeout = 3 * time.Second

// clients are the Pods the Services are reached from: one on every node.
func clients() []*cluster.Pod {
	return []*cluster.Pod{pods["pod-a1"], pods["pod-b1"], pods["pod-c1"]}
}

// TestKubernetesDefaultFromEveryNode resolves kubernetes.default from a Pod on every node through the Pod's own
// resolver configuration (kube-dns, CoreDNS on node-a, reached through its ClusterIP over UDP) and asks
// https://kubernetes.default/version: the real API server answers through the kubernetes Service, whose
// endpoint is the API server's address on the underlay.
// Upstream: test/e2e/network/dns.go "should provide DNS for the cluster [Conformance]" and
// "should resolve DNS of partial qualified names for services"; test/e2e/network/service.go "should provide
// secure master service [Conformance]".
func TestKubernetesDefaultFromEveryNode(t *testing.T) {
	g := NewWithT(t)
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())
	want, err := dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range clients() {
		resolv, err := p.Exec("cat", "/etc/resolv.conf")
		g.Expect(err).NotTo(HaveOccurred(), "the Pod's resolver configuration")
		g.Expect(resolv).To(ContainSubstring("nameserver " + cluster.DNSServiceIP.String()))
		g.Expect(resolv).To(ContainSubstring("search default.svc.cluster.local svc.cluster.local cluster.local"))
		// DNS is UDP: a lost query makes the resolver give up on that name (EAI_AGAIN) after its
		// timeouts. Up to 3 tries, each failure logged.
		var kd cluster.KubernetesDefaultAnswer
		for try := 1; try <= 3; try++ {
			if kd, err = c.KubernetesDefault(p); err == nil {
				break
			}
			t.Logf("try %d from %s failed: %v", try, p.Name, err)
		}
		g.Expect(err).NotTo(HaveOccurred(), "from %s", p.Name)
		g.Expect(kd.Resolved).To(Equal(cluster.KubernetesServiceIP), "kubernetes.default resolves to the kubernetes Service's ClusterIP in %s", p.Name)
		g.Expect(kd.Status).To(HavePrefix("HTTP/1.1 200"), "from %s", p.Name)
		g.Expect(kd.GitVersion).To(Equal(want.GitVersion), "from %s", p.Name)
	}
}

// echoPod is an endpoint Pod of the tests' Services: its named ports map to its own numbers, so that a named
// targetPort resolves per endpoint.
type echoPod struct {
	pod  *cluster.Pod
	echo *cluster.NamedEcho
}

// echoPort numbers per endpoint Pod: "http" is 8080 on one Pod and 8090 on another (named targetPort), "alt" is
// 9091 everywhere (numeric targetPort), "dns-like" is UDP on the "http" number.
func echoPorts(http int) []corev1.ContainerPort {
	return []corev1.ContainerPort{
		{Name: "http", ContainerPort: int32(http), Protocol: corev1.ProtocolTCP},
		{Name: "udp", ContainerPort: int32(http), Protocol: corev1.ProtocolUDP},
	}
}

const altPort = 9091

// addEchoPod adds an endpoint Pod labelled app=echo on the node and starts its echo server.
func addEchoPod(t *testing.T, name, nodeName string, http int) *echoPod {
	t.Helper()
	g := NewWithT(t)
	p, err := c.AddPodWith(context.Background(), node(nodeName), name, cluster.PodOptions{
		Labels: map[string]string{"app": "echo"}, Ports: echoPorts(http)}, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	e, err := cluster.ServeNamedEcho(p.NSPath, name, []int{http, altPort}, []int{http})
	g.Expect(err).NotTo(HaveOccurred())
	ep := &echoPod{pod: p, echo: e}
	t.Cleanup(func() { ep.remove(t) })
	return ep
}

// remove stops the echo server and deletes the Pod; a second call does nothing.
func (e *echoPod) remove(t *testing.T) {
	if e.echo == nil {
		return
	}
	e.echo.Close()
	e.echo = nil
	if err := c.DeletePod(context.Background(), e.pod); err != nil {
		t.Errorf("deleting Pod %s: %v", e.pod.Name, err)
	}
}

// echoService creates the Service "echo" selecting app=echo: TCP 80 to the named port "http", TCP 81 to 9091,
// UDP 80 to the named port "udp"; of type NodePort.
func echoService(t *testing.T) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "echo"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")},
				{Name: "alt", Port: 81, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(altPort)},
				{Name: "udp", Port: 80, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("udp")},
			},
		},
	}
	NewWithT(t).Expect(c.Client.Create(context.Background(), svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	return svc
}

// waitEndpoints waits until kube-controller-manager's EndpointSlices of the Service list exactly the Pods as
// ready endpoints.
func waitEndpoints(t *testing.T, svc *corev1.Service, want ...*echoPod) {
	t.Helper()
	var ips []netip.Addr
	for _, e := range want {
		ips = append(ips, e.pod.IP)
	}
	waitEndpointIPs(t, svc, ips...)
}

// waitEndpointIPs waits until the Service's EndpointSlices hold exactly these ready addresses.
func waitEndpointIPs(t *testing.T, svc *corev1.Service, want ...netip.Addr) {
	t.Helper()
	var ips []string
	for _, ip := range want {
		ips = append(ips, ip.String())
	}
	NewWithT(t).Eventually(func(g Gomega) {
		list := &discoveryv1.EndpointSliceList{}
		g.Expect(c.Client.List(context.Background(), list, client.InNamespace(svc.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name})).To(Succeed())
		var got []string
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					got = append(got, ep.Addresses...)
				}
			}
		}
		g.Expect(got).To(ConsistOf(ips))
	}).WithTimeout(converge).Should(Succeed(), "the EndpointSlices of %s", svc.Name)
}

// askUntilAll asks dst over new connections from a place until every one of names answered, and fails on any
// other name or on a client address other than wantClient (when valid). It returns how many asks it took.
func askUntilAll(t *testing.T, from cluster.Place, network string, dst netip.AddrPort, wantClient netip.Addr, names ...string) int {
	t.Helper()
	seen := map[string]bool{}
	asks := 0
	NewWithT(t).Eventually(func(g Gomega) {
		asks++
		a, err := cluster.AskEcho(context.Background(), from, network, dst, askTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names).To(ContainElement(a.Name), "only the Service's endpoints answer %s %s", network, dst)
		if wantClient.IsValid() {
			g.Expect(a.Client).To(Equal(wantClient), "the client address %s saw", a.Name)
		}
		seen[a.Name] = true
		g.Expect(seen).To(HaveLen(len(names)), "endpoints that answered so far")
	}).WithTimeout(converge).WithPolling(10*time.Millisecond).Should(Succeed(), "%s %s from %s", network, dst, from)
	return asks
}

// askOne asks dst once over a new connection and fails unless one of names answers, seeing wantClient (when
// valid). For UDP: OVS picks a select group's bucket by dp_hash, and the userspace datapath's symmetric L4 hash
// leaves UDP ports out, so every UDP flow between two addresses takes the same endpoint; which one is OVS's
// choice.
func askOne(t *testing.T, from cluster.Place, network string, dst netip.AddrPort, wantClient netip.Addr, names ...string) {
	t.Helper()
	g := NewWithT(t)
	a, err := cluster.AskEcho(context.Background(), from, network, dst, askTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(ContainElement(a.Name), "only the Service's endpoints answer %s %s", network, dst)
	if wantClient.IsValid() {
		g.Expect(a.Client).To(Equal(wantClient), "the client address %s saw", a.Name)
	}
}

// TestServiceClusterIPAndNodePort reaches a NodePort Service with endpoints on node-a and node-b: its ClusterIP
// from a Pod on every node (TCP to a named targetPort that is 8080 on one endpoint and 8090 on the other, TCP to
// a numeric one, every endpoint answering; UDP to a named one, an endpoint answering), each seeing the Pod's own
// address; its NodePort
// from the external host on every node and from Pods on their own node and another.
// Upstream: test/e2e/network/service.go "should serve a basic endpoint from pods [Conformance]", "should serve
// multiport endpoints from pods [Conformance]", "should be able to create a functioning NodePort service
// [Conformance]"; test/e2e/network/networking.go "Granular Checks: Services should function for pod-Service:
// http", "... pod-Service: udp", "... node-Service: http".
func TestServiceClusterIPAndNodePort(t *testing.T) {
	ea := addEchoPod(t, "echo-a", "node-a", 8080)
	eb := addEchoPod(t, "echo-b", "node-b", 8090)
	svc := echoService(t)
	waitEndpoints(t, svc, ea, eb)
	names := []string{"echo-a", "echo-b"}
	clusterIP := netip.MustParseAddr(svc.Spec.ClusterIP)
	for _, p := range clients() {
		t.Run("ClusterIP from "+p.Name, func(t *testing.T) {
			askUntilAll(t, p.Place(), "tcp4", netip.AddrPortFrom(clusterIP, 80), p.IP, names...)
			askUntilAll(t, p.Place(), "tcp4", netip.AddrPortFrom(clusterIP, 81), p.IP, names...)
			askOne(t, p.Place(), "udp4", netip.AddrPortFrom(clusterIP, 80), p.IP, names...)
		})
	}
	nodePort := uint16(svc.Spec.Ports[0].NodePort)
	udpNodePort := uint16(svc.Spec.Ports[2].NodePort)
	for _, n := range c.Nodes() {
		t.Run("NodePort on "+n.Name+" from the external host", func(t *testing.T) {
			askUntilAll(t, c.ExternalPlace(), "tcp4", netip.AddrPortFrom(n.IP, nodePort), netip.Addr{}, names...)
			askOne(t, c.ExternalPlace(), "udp4", netip.AddrPortFrom(n.IP, udpNodePort), netip.Addr{}, names...)
		})
	}
	t.Run("NodePort from Pods, on their own node and another", func(t *testing.T) {
		a1, b1 := pods["pod-a1"], pods["pod-b1"]
		askUntilAll(t, a1.Place(), "tcp4", netip.AddrPortFrom(node("node-a").IP, nodePort), netip.Addr{}, names...)
		askUntilAll(t, b1.Place(), "tcp4", netip.AddrPortFrom(node("node-c").IP, nodePort), netip.Addr{}, names...)
	})
	t.Run("the node itself to the ClusterIP", func(t *testing.T) {
		askUntilAll(t, node("node-b").Host(), "tcp4", netip.AddrPortFrom(clusterIP, 80), netip.Addr{}, names...)
	})
}

// TestServiceNodePortFromTheNodeItself reaches a NodePort Service with endpoints on node-a and node-b from the
// network namespace of node-a and of node-b, each through its own node IP: the host NATs its own connection to
// 169.254.0.252 (an nftables output DNAT, the twin of a Windows NetNat static mapping), routes it into the
// gateway, and the switch balances it over every endpoint, the local one and the other node's. TCP reaches
// both; UDP gets an answer. Once the Service is deleted, the host no longer NATs the port: a server of the
// node's own on it answers.
// Upstream: test/e2e/network/service.go "should be able to create a functioning NodePort service
// [Conformance]" (its connection from the node to its own NodePort); test/e2e/network/networking.go "Granular
// Checks: Services should function for node-Service: http" and "... udp" (node IPs as the address).
func TestServiceNodePortFromTheNodeItself(t *testing.T) {
	ea := addEchoPod(t, "echo-a", "node-a", 8080)
	eb := addEchoPod(t, "echo-b", "node-b", 8090)
	svc := echoService(t)
	waitEndpoints(t, svc, ea, eb)
	names := []string{"echo-a", "echo-b"}
	nodePort := uint16(svc.Spec.Ports[0].NodePort)
	udpNodePort := uint16(svc.Spec.Ports[2].NodePort)
	for _, name := range []string{"node-a", "node-b"} {
		n := node(name)
		t.Run(name+" to its own NodePort", func(t *testing.T) {
			start := time.Now()
			askUntilAll(t, n.Host(), "tcp4", netip.AddrPortFrom(n.IP, nodePort), netip.Addr{}, names...)
			askOne(t, n.Host(), "udp4", netip.AddrPortFrom(n.IP, udpNodePort), netip.Addr{}, names...)
			t.Logf("%s reached every endpoint through its own NodePort in %s", name, time.Since(start))
		})
	}
	// Once the Service is gone, the host no longer NATs the port: a server of node-a's own on it answers
	// node-a's connection, which a leftover NAT would still send into the switch, where nothing answers.
	a := node("node-a")
	NewWithT(t).Expect(c.Client.Delete(context.Background(), svc)).To(Succeed())
	own, err := cluster.ServeEcho(a.NSPath, int(nodePort))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(own.Close)
	NewWithT(t).Eventually(func() (netip.Addr, error) {
		return cluster.DialEcho(context.Background(), a.Host(), netip.AddrPortFrom(a.IP, nodePort), askTimeout)
	}).WithTimeout(converge).Should(Equal(a.IP), "node-a's own server on port %d, its Service deleted", nodePort)
}

// TestServiceEndpointChanges adds and removes endpoint Pods of a Service with connections open: new connections
// reach an added endpoint and no longer a removed one, and an established connection to an endpoint that stays
// keeps working through every change.
// Upstream: test/e2e/network/networking.go "Granular Checks: Services should update endpoints: http" and
// "should update endpoints: udp"; test/e2e/network/service.go "should be able to up and down services";
// test/e2e/network/conntrack.go "should be able to preserve UDP traffic when server pod cycles for a ClusterIP
// service" (its TCP counterpart: the surviving endpoint's connection).
func TestServiceEndpointChanges(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ea := addEchoPod(t, "echo-a", "node-a", 8080)
	eb := addEchoPod(t, "echo-b", "node-b", 8090)
	svc := echoService(t)
	waitEndpoints(t, svc, ea, eb)
	dst := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	from := pods["pod-c1"].Place()
	askUntilAll(t, from, "tcp4", dst, pods["pod-c1"].IP, "echo-a", "echo-b")

	// An established connection to each endpoint.
	open := map[string]*cluster.EchoConn{}
	g.Eventually(func(g Gomega) {
		conn, err := cluster.DialEchoConn(ctx, from, dst, askTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		a, err := conn.Ask(askTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		if open[a.Name] == nil {
			open[a.Name] = conn
		} else {
			_ = conn.Close()
		}
		g.Expect(open).To(HaveLen(2))
	}).WithTimeout(converge).WithPolling(10 * time.Millisecond).Should(Succeed())
	defer func() {
		for _, conn := range open {
			_ = conn.Close()
		}
	}()
	stillAnswers := func(name string) {
		t.Helper()
		a, err := open[name].Ask(askTimeout)
		g.Expect(err).NotTo(HaveOccurred(), "the established connection to %s", name)
		g.Expect(a.Name).To(Equal(name), "the established connection stays with its endpoint")
	}

	ec := addEchoPod(t, "echo-c", "node-c", 8080)
	waitEndpoints(t, svc, ea, eb, ec)
	asks := askUntilAll(t, from, "tcp4", dst, pods["pod-c1"].IP, "echo-a", "echo-b", "echo-c")
	t.Logf("an added endpoint: every endpoint answered within %d new connections", asks)
	stillAnswers("echo-a")
	stillAnswers("echo-b")

	eb.remove(t)
	waitEndpoints(t, svc, ea, ec)
	// Once the agents realised the change no new connection reaches the removed endpoint: 30 in a row.
	g.Eventually(func(g Gomega) {
		for range 30 {
			a, err := cluster.AskEcho(ctx, from, "tcp4", dst, askTimeout)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Name).To(BeElementOf("echo-a", "echo-c"))
		}
	}).WithTimeout(converge).Should(Succeed())
	stillAnswers("echo-a")
}

// TestServiceDeletedLeavesNothing deletes a Service: no node keeps a flow matching its ClusterIP or NodePorts,
// nor a group naming its endpoints, and the ClusterIP no longer answers.
// Upstream: test/e2e/network/service.go "should be able to up and down services" (the down half) and
// "should release NodePorts on delete".
func TestServiceDeletedLeavesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ea := addEchoPod(t, "echo-a", "node-a", 8080)
	svc := echoService(t)
	waitEndpoints(t, svc, ea)
	dst := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	askUntilAll(t, pods["pod-b1"].Place(), "tcp4", dst, pods["pod-b1"].IP, "echo-a")
	endpoint := fmt.Sprintf("nat(dst=%s:", ea.pod.IP)
	// Every node's groups have the endpoint before the Service goes (pod-b1 reaching it shows node-b's
	// only; node-a's agent had not yet dropped the endpoint of the previous test's Service of the same name
	// when node-b's answered, 1 run in 4).
	reached := time.Now()
	for _, n := range c.Nodes() {
		g.Eventually(func() (string, error) {
			groups, err := n.OVS.DumpGroups(cluster.BridgeName)
			return strings.Join(groups, "\n"), err
		}).WithTimeout(converge).Should(ContainSubstring(endpoint), "the Service's groups on %s", n.Name)
		t.Logf("%s's groups had the endpoint %v after pod-b1 reached it", n.Name, time.Since(reached).Round(time.Millisecond))
	}
	g.Expect(c.Client.Delete(ctx, svc)).To(Succeed())
	for _, n := range c.Nodes() {
		g.Eventually(func(g Gomega) {
			groups, err := n.OVS.DumpGroups(cluster.BridgeName)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Join(groups, "\n")).NotTo(ContainSubstring(endpoint), "a group of the deleted Service on %s", n.Name)
			flows, err := n.Flows()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(flows).NotTo(ContainSubstring("nw_dst="+svc.Spec.ClusterIP+","), "a flow of the deleted Service on %s", n.Name)
			for _, p := range svc.Spec.Ports {
				g.Expect(flows).NotTo(ContainSubstring(fmt.Sprintf("tp_dst=%d ", p.NodePort)), "a NodePort flow of the deleted Service on %s", n.Name)
			}
		}).WithTimeout(converge).Should(Succeed())
	}
	_, err := cluster.AskEcho(ctx, pods["pod-b1"].Place(), "tcp4", dst, time.Second)
	g.Expect(err).To(HaveOccurred(), "the deleted Service's ClusterIP no longer answers")
}

// TestServicesAfterVswitchdRestart kills ovs-vswitchd on node-a (where CoreDNS and an endpoint run) and starts
// it again: the agent replays the Services' groups and flows, and DNS, the ClusterIP and the NodePort answer
// again.
// Upstream: test/e2e/network/service.go "should work after restarting kube-proxy [Disruptive]" (winnet's agent
// and OVS are kube-proxy's place here).
func TestServicesAfterVswitchdRestart(t *testing.T) {
	g := NewWithT(t)
	ea := addEchoPod(t, "echo-a", "node-a", 8080)
	svc := echoService(t)
	waitEndpoints(t, svc, ea)
	dst := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	a1 := pods["pod-a1"]
	askUntilAll(t, a1.Place(), "tcp4", dst, a1.IP, "echo-a")

	a := node("node-a")
	g.Expect(a.OVS.KillVswitchd()).To(Succeed())
	g.Expect(a.OVS.StartVswitchd()).To(Succeed())
	restarted := time.Now()
	// Short tries: a lost SYN is sent again after 1 s, so each try measures to about that.
	g.Eventually(func() error {
		_, err := cluster.AskEcho(context.Background(), a1.Place(), "tcp4", dst, 500*time.Millisecond)
		return err
	}).WithTimeout(converge).WithPolling(50 * time.Millisecond).Should(Succeed())
	t.Logf("ClusterIP answers %v after ovs-vswitchd restarted on node-a", time.Since(restarted).Round(time.Millisecond))
	askUntilAll(t, a1.Place(), "tcp4", dst, a1.IP, "echo-a")
	askUntilAll(t, c.ExternalPlace(), "tcp4", netip.AddrPortFrom(a.IP, uint16(svc.Spec.Ports[0].NodePort)), netip.Addr{}, "echo-a")
	for _, p := range clients() {
		g.Eventually(func() ([]netip.Addr, error) {
			return cluster.LookupIn(context.Background(), p.NSPath, cluster.DNSServiceIP, "echo.default.svc."+cluster.ClusterDomain)
		}).WithTimeout(converge).Should(Equal([]netip.Addr{netip.MustParseAddr(svc.Spec.ClusterIP)}), "DNS from %s", p.Name)
	}
	g.Expect(c.WaitReady(context.Background(), converge)).To(Succeed())
}
