//go:build linux

package services_test

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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

const serverPort = 8080

// nodePortService creates a NodePort Service with a TCP and a UDP port (80 -> the named target
// port "web") and, as the EndpointSlice controller would, its EndpointSlice with the endpoints
// given (Pod and node). It returns the Service as the API server allocated it.
func nodePortService(t *testing.T, name string, endpoints map[*framework.TestPod]string) *corev1.Service {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("web")},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 80, TargetPort: intstr.FromString("web")},
		}},
	}
	g.Expect(server.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), svc) })
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(serverPort))},
			{Name: ptr.To("udp"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(serverPort))},
		},
	}
	for p, node := range endpoints {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IP.String()}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	g.Expect(server.Client.Create(ctx, slice)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), slice) })
	return svc
}

func addrPort(ip string, port int32) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
}

// expectAnswer waits until the namespace's connection to addr is answered by want, and returns the
// client address the server saw.
func expectAnswer(t *testing.T, nsName, network string, addr netip.AddrPort, want string) string {
	t.Helper()
	var answer string
	NewWithT(t).Eventually(func() error {
		var err error
		answer, err = framework.Ask(nsName, network, addr)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(answer, want+" ") {
			return fmt.Errorf("answered by %q, want %s", answer, want)
		}
		return nil
	}).WithTimeout(15*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "%s %s from %s", network, addr, nsName)
	from, _, _ := strings.Cut(strings.TrimPrefix(answer, want+" "), ":")
	return from
}

// TestClusterIPAndNodePort: Pods and the node itself reach a ClusterIP whose endpoint is on their
// node or on another node, over TCP and UDP, with the named target port resolved from the
// EndpointSlice; the external host reaches the NodePort on a node whose endpoint is local (seen
// with its own address) or on the other node (SNATed to the node's gateway, and the reply finds
// its way back); a Service with an SCTP port gets a Warning Event; deleting the Services leaves no
// group, flow or host route of theirs.
// Upstream: test/e2e/network/service.go "should serve a basic endpoint from pods", "should serve
// multiport endpoints from pods", "should be able to create a functioning NodePort service".
func TestClusterIPAndNodePort(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.61.0/24"))
	a := framework.StartPodNode(t, server, u, "svc-a", "192.168.61.11/24", "10.244.61.0/24", converge)
	b := framework.StartPodNode(t, server, u, "svc-b", "192.168.61.12/24", "10.244.62.0/24", converge)
	a.Route(t)
	b.Route(t)
	if err := simnode.DisableTxChecksum(u.External().NS, simnode.HostIfName); err != nil {
		t.Fatal(err)
	}

	cli := a.AddPod(t, "client", framework.TestPodOptions{})
	local := a.AddPod(t, "server-a", framework.TestPodOptions{})
	remote := b.AddPod(t, "server-b", framework.TestPodOptions{})
	framework.Serve(t, local.NS, "server-a", serverPort)
	framework.Serve(t, remote.NS, "server-b", serverPort)
	// Pod to Pod across nodes first: the data path the Services build on.
	expectAnswer(t, cli.NS, "tcp4", netip.AddrPortFrom(remote.IP, serverPort), "server-b")

	svcLocal := nodePortService(t, "web-local", map[*framework.TestPod]string{local: a.Name})
	svcRemote := nodePortService(t, "web-remote", map[*framework.TestPod]string{remote: b.Name})

	for _, network := range []string{"tcp4", "udp4"} {
		idx := 0
		if network == "udp4" {
			idx = 1
		}
		t.Run("Pod to ClusterIP, endpoint on the same node, "+network, func(t *testing.T) {
			from := expectAnswer(t, cli.NS, network, addrPort(svcLocal.Spec.ClusterIP, 80), "server-a")
			NewWithT(t).Expect(from).To(Equal(cli.IP.String()), "the endpoint sees the Pod's own address")
		})
		t.Run("Pod to ClusterIP, endpoint on another node, "+network, func(t *testing.T) {
			from := expectAnswer(t, cli.NS, network, addrPort(svcRemote.Spec.ClusterIP, 80), "server-b")
			NewWithT(t).Expect(from).To(Equal(cli.IP.String()), "the endpoint sees the Pod's own address")
		})
		t.Run("external host to NodePort, endpoint on that node, "+network, func(t *testing.T) {
			from := expectAnswer(t, u.External().NS, network, netip.AddrPortFrom(a.NodeIP.Addr(), uint16(svcLocal.Spec.Ports[idx].NodePort)), "server-a")
			NewWithT(t).Expect(from).To(Equal(u.ExternalIP.String()), "no SNAT for a local endpoint")
		})
		t.Run("external host to NodePort, endpoint on another node, "+network, func(t *testing.T) {
			from := expectAnswer(t, u.External().NS, network, netip.AddrPortFrom(a.NodeIP.Addr(), uint16(svcRemote.Spec.Ports[idx].NodePort)), "server-b")
			NewWithT(t).Expect(from).To(Equal(a.PodCIDR.Addr().Next().String()), "SNATed to the node's gateway so that the reply comes back through it")
		})
		t.Run("the node itself to ClusterIP, endpoint on the same node and on another, "+network, func(t *testing.T) {
			expectAnswer(t, a.NS, network, addrPort(svcLocal.Spec.ClusterIP, 80), "server-a")
			expectAnswer(t, a.NS, network, addrPort(svcRemote.Spec.ClusterIP, 80), "server-b")
		})
		t.Run("Pod to NodePort on its node, "+network, func(t *testing.T) {
			expectAnswer(t, cli.NS, network, netip.AddrPortFrom(a.NodeIP.Addr(), uint16(svcRemote.Spec.Ports[idx].NodePort)), "server-b")
		})
	}

	t.Run("the agents' metrics give the Services realised and the programming latency", func(t *testing.T) {
		g := NewWithT(t)
		families, err := ctrlmetrics.Registry.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		var services float64
		var passes uint64
		for _, f := range families {
			for _, m := range f.GetMetric() {
				switch f.GetName() {
				case "winnet_service_realised":
					for _, l := range m.GetLabel() {
						if l.GetName() == "kind" && l.GetValue() == "services" {
							services = m.GetGauge().GetValue()
						}
					}
				case "winnet_service_programming_duration_seconds":
					passes = m.GetHistogram().GetSampleCount()
				}
			}
		}
		g.Expect(services).To(BeNumerically(">=", 2), "the test's Services are realised")
		g.Expect(passes).To(BeNumerically(">", 0), "passes that changed the switch are timed")

		// kubectl describe windowsnodenetwork shows them too.
		g.Eventually(func(g Gomega) {
			w := &networkv1alpha1.WindowsNodeNetwork{}
			g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: a.Name}, w)).To(Succeed())
			c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.ServicesReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("realised in OVS"))
			g.Expect(w.Status.Services.Services).To(BeNumerically(">=", 2))
			g.Expect(w.Status.Services.Ports).To(BeNumerically(">=", 2))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("Services work again after ovs-vswitchd is killed and restarted: groups are replayed", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(a.OVS.KillVswitchd()).To(Succeed())
		g.Expect(a.OVS.StartVswitchd()).To(Succeed())
		expectAnswer(t, cli.NS, "tcp4", addrPort(svcRemote.Spec.ClusterIP, 80), "server-b")
		expectAnswer(t, u.External().NS, "tcp4", netip.AddrPortFrom(a.NodeIP.Addr(), uint16(svcRemote.Spec.Ports[0].NodePort)), "server-b")
	})

	t.Run("a NodePort is answered on every address of the node's interface, until it is removed", func(t *testing.T) {
		g := NewWithT(t)
		// A second address on the bridge interface (the management vNIC that took the uplink's
		// addresses), as an administrator or DHCP would add it.
		second := netip.MustParseAddr("192.168.61.21")
		a.MustExec(t, "ip", "addr", "add", second.String()+"/24", "dev", "br-int")
		t.Cleanup(func() { _, _ = a.Exec("ip", "addr", "del", second.String()+"/24", "dev", "br-int") })
		for idx, network := range []string{"tcp4", "udp4"} {
			from := expectAnswer(t, u.External().NS, network, netip.AddrPortFrom(second, uint16(svcLocal.Spec.Ports[idx].NodePort)), "server-a")
			g.Expect(from).To(Equal(u.ExternalIP.String()), "no SNAT for a local endpoint")
			from = expectAnswer(t, u.External().NS, network, netip.AddrPortFrom(second, uint16(svcRemote.Spec.Ports[idx].NodePort)), "server-b")
			g.Expect(from).To(Equal(a.PodCIDR.Addr().Next().String()), "SNATed to the node's gateway")
		}
		nodePortFlows := func(g Gomega) []string {
			flows, err := a.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
			g.Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, f := range flows {
				if strings.Contains(f, "nw_dst="+second.String()+",") {
					out = append(out, f)
				}
			}
			return out
		}
		g.Expect(nodePortFlows(g)).NotTo(BeEmpty())
		for _, f := range nodePortFlows(g) {
			g.Expect(f).NotTo(ContainSubstring("169.254."), "no NodePort on a link-local address")
		}

		// The address goes; the external host still sends to the node's MAC (a permanent
		// neighbour entry, as a stale ARP cache would), so only the flows decide.
		a.MustExec(t, "ip", "addr", "del", second.String()+"/24", "dev", "br-int")
		u.External().MustExec(t, "ip", "neigh", "replace", second.String(), "lladdr", a.UplinkMAC.String(), "dev", simnode.HostIfName, "nud", "permanent")
		t.Cleanup(func() { _, _ = u.External().Exec("ip", "neigh", "del", second.String(), "dev", simnode.HostIfName) })
		g.Eventually(nodePortFlows).WithTimeout(converge).Should(BeEmpty(), "the NodePort flows of the removed address go")
		g.Consistently(func() error {
			_, err := framework.Ask(u.External().NS, "tcp4", netip.AddrPortFrom(second, uint16(svcLocal.Spec.Ports[0].NodePort)))
			return err
		}).WithTimeout(3*time.Second).WithPolling(500*time.Millisecond).Should(HaveOccurred(), "the removed address no longer answers the NodePort")
		// The node IP still does.
		expectAnswer(t, u.External().NS, "tcp4", netip.AddrPortFrom(a.NodeIP.Addr(), uint16(svcLocal.Spec.Ports[0].NodePort)), "server-a")
	})

	t.Run("SCTP is refused with a Warning Event", func(t *testing.T) {
		g := NewWithT(t)
		sctp := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sctp"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 9}}},
		}
		g.Expect(server.Client.Create(ctx, sctp)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), sctp) })
		g.Eventually(func(g Gomega) {
			g.Expect(server.WarningReasons(ctx, "default", "sctp")).To(ContainElement(service.UnsupportedProtocolReason))
		}).WithTimeout(converge).Should(Succeed())
	})

	t.Run("deleting the Services leaves no group and no flow of theirs", func(t *testing.T) {
		g := NewWithT(t)
		// The API server's own Service (default/kubernetes) stays; the groups of ours name their
		// endpoints.
		ours := func(groups []string) []string {
			var out []string
			for _, gr := range groups {
				if strings.Contains(gr, "dst="+local.IP.String()+":") || strings.Contains(gr, "dst="+remote.IP.String()+":") {
					out = append(out, gr)
				}
			}
			return out
		}
		for _, n := range []*framework.PodNode{a, b} {
			groups, err := n.OVS.DumpGroups("br-int")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ours(groups)).To(HaveLen(12), "the two Services' groups on %s: TCP and UDP, cluster, external and the host's own NodePort connections", n.Name)
		}
		for _, s := range []*corev1.Service{svcLocal, svcRemote} {
			g.Expect(server.Client.Delete(ctx, s)).To(Succeed())
		}
		for _, n := range []*framework.PodNode{a, b} {
			g.Eventually(func(g Gomega) {
				groups, err := n.OVS.DumpGroups("br-int")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ours(groups)).To(BeEmpty())
				flows, err := n.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
				g.Expect(err).NotTo(HaveOccurred())
				for _, f := range flows {
					for _, s := range []*corev1.Service{svcLocal, svcRemote} {
						g.Expect(f).NotTo(ContainSubstring("nw_dst="+s.Spec.ClusterIP+","), "flow of the deleted Service: %s", f)
						for _, p := range s.Spec.Ports {
							g.Expect(f).NotTo(ContainSubstring(fmt.Sprintf("tp_dst=%d ", p.NodePort)), "flow of the deleted Service: %s", f)
						}
					}
				}
			}).WithTimeout(converge).Should(Succeed(), "on %s", n.Name)
		}
		g.Eventually(func(g Gomega) {
			routes, err := a.Exec("ip", "route")
			g.Expect(err).NotTo(HaveOccurred())
			for _, s := range []*corev1.Service{svcLocal, svcRemote} {
				g.Expect(routes).NotTo(ContainSubstring(s.Spec.ClusterIP+" "), "the host route of the deleted Service")
			}
		}).WithTimeout(converge).Should(Succeed())
		_, err := framework.Ask(cli.NS, "tcp4", addrPort(svcLocal.Spec.ClusterIP, 80))
		g.Expect(err).To(HaveOccurred(), "the deleted ClusterIP no longer answers")
	})
	_ = g
}

// TestExternalNameServiceLeavesOtherServicesAlone: creating, changing and deleting an ExternalName
// Service (no port the pipeline realises, so no cookie object of its own) leaves the flows every
// Service shares alone: a Pod keeps reaching a ClusterIP whose endpoint is on its node, and the
// endpoint keeps reaching itself through it (hairpin), over TCP, at every probe. The passes of such
// a Service once synced cookie object 0, which is the shared object (ServiceBaseFlows and the
// hairpin flows), to no flows: same-node Service traffic was dropped until the next full pass.
// Upstream: Kubernetes' [Feature:NetworkPolicy] tests (same-node Pods probing each other through
// their Services) failed while "Services should be able to change the type from ClusterIP to
// ExternalName" and "DNS should provide DNS for ExternalName services" ran beside them.
func TestExternalNameServiceLeavesOtherServicesAlone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.64.0/24"))
	a := framework.StartPodNode(t, server, u, "extname-a", "192.168.64.11/24", "10.244.64.0/24", converge)
	cli := a.AddPod(t, "client", framework.TestPodOptions{})
	srv := a.AddPod(t, "server", framework.TestPodOptions{})
	framework.Serve(t, srv.NS, "server", serverPort)
	svc := nodePortService(t, "web-extname", map[*framework.TestPod]string{srv: a.Name})
	clusterIP := addrPort(svc.Spec.ClusterIP, 80)
	expectAnswer(t, cli.NS, "tcp4", clusterIP, "server")
	expectAnswer(t, srv.NS, "tcp4", clusterIP, "server")

	// Every probe for 3 s answers: the agent handles the ExternalName Service's event within
	// milliseconds, and the shared flows came back only with a full pass (every few drift checks).
	stillAnswered := func(step string) {
		t.Helper()
		g.Consistently(func() error {
			for _, from := range []*framework.TestPod{cli, srv} {
				answer, err := framework.Ask(from.NS, "tcp4", clusterIP)
				if err != nil {
					return fmt.Errorf("from %s: %w", from.Name, err)
				}
				if !strings.HasPrefix(answer, "server ") {
					return fmt.Errorf("from %s: answered by %q", from.Name, answer)
				}
			}
			return nil
		}).WithTimeout(3*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "the same-node ClusterIP %s after %s", clusterIP, step)
	}
	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "extname"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com",
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	g.Expect(server.Client.Create(ctx, ext)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ext) })
	stillAnswered("creating an ExternalName Service")
	ext.Spec.ExternalName = "example.org"
	g.Expect(server.Client.Update(ctx, ext)).To(Succeed())
	stillAnswered("changing the ExternalName Service")
	g.Expect(server.Client.Delete(ctx, ext)).To(Succeed())
	stillAnswered("deleting the ExternalName Service")
}
