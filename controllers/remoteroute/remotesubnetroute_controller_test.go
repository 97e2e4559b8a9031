//go:build linux

package remoteroute_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/remoteroute"
	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// Two simulated nodes, each with its own OVS, agent (node network + remote routes) and HNS
// simulator, an underlay between them, and winnet-controller deriving the routes from the Nodes, all
// on one real API server.

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "remote route tests", &server, framework.MainOptions{
		Controller: &controller.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0"},
	})
}

const timeout = 30 * time.Second

type node struct {
	*simnode.Node
	name    string
	podCIDR string
	gateway netip.Addr
}

func createNode(t *testing.T, g Gomega, n *node) {
	ctx := context.Background()
	k := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: corev1.NodeSpec{PodCIDR: n.podCIDR, PodCIDRs: []string{n.podCIDR}}}
	g.Expect(server.Client.Create(ctx, k)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), k) })
	setInternalIP(g, n.name, n.NodeIP.Addr().String())
	g.Expect(server.Client.Create(ctx, &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(n.podCIDR)}, NodeIP: networkv1alpha1.IPv4Address(n.NodeIP.Addr().String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"},
		},
	})).To(Succeed())
}

// setInternalIP and updateWNN read, change and write again on a conflict, as any client does: the
// agents write the same objects (status, finalizers) while the test runs.
func setInternalIP(g Gomega, name, ip string) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		k := &corev1.Node{}
		if err := server.Client.Get(context.Background(), client.ObjectKey{Name: name}, k); err != nil {
			return err
		}
		k.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		return server.Client.Status().Update(context.Background(), k)
	})).To(Succeed())
}

func routesReady(name string, installed int32) func(Gomega) {
	return func(g Gomega) {
		w := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(server.Client.Get(context.Background(), client.ObjectKey{Name: name}, w)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(w.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "Ready: %v", w.Status.Conditions)
		g.Expect(meta.IsStatusConditionTrue(w.Status.Conditions, networkv1alpha1.RoutesReadyCondition)).To(BeTrue())
		g.Expect(w.Status.RemoteRoutes).To(Equal(networkv1alpha1.RemoteRoutesStatus{Desired: installed, Installed: installed}))
	}
}

// gatewayPing pings the remote node's gateway from the local node's gateway address.
func gatewayPing(from, to *node) func(Gomega) {
	return func(g Gomega) {
		out, err := from.Exec("ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "-I", from.gateway.String(), to.gateway.String())
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring(" 0% packet loss"))
	}
}

func (n *node) flows(g Gomega) string {
	lines, err := n.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	return strings.Join(lines, "\n")
}

// withoutTable drops the dump lines of one table.
func withoutTable(flows string, table uint8) string {
	tag := fmt.Sprintf("table=%d,", table)
	var keep []string
	for _, l := range strings.Split(flows, "\n") {
		if !strings.Contains(l, tag) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func updateWNN(g Gomega, name string, mutate func(*networkv1alpha1.WindowsNodeNetwork)) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		w := &networkv1alpha1.WindowsNodeNetwork{}
		if err := server.Client.Get(context.Background(), client.ObjectKey{Name: name}, w); err != nil {
			return err
		}
		mutate(w)
		return server.Client.Update(context.Background(), w)
	})).To(Succeed())
}

func TestTwoNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.20.0/24"))
	a := &node{Node: underlay.AddNode(t, "rt-a", netip.MustParsePrefix("192.168.20.11/24"), simnode.NodeOptions{StartOVS: true}),
		name: "rt-a", podCIDR: "10.244.1.0/24", gateway: netip.MustParseAddr("10.244.1.1")}
	b := &node{Node: underlay.AddNode(t, "rt-b", netip.MustParsePrefix("192.168.20.12/24"), simnode.NodeOptions{StartOVS: true}),
		name: "rt-b", podCIDR: "10.244.2.0/24", gateway: netip.MustParseAddr("10.244.2.1")}
	for _, n := range []*node{a, b} {
		framework.StartAgent(t, server, n.Node)
		createNode(t, g, n)
	}
	for _, n := range []*node{a, b} {
		g.Eventually(routesReady(n.name, 1)).WithTimeout(timeout).Should(Succeed())
	}

	t.Run("VXLAN", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(gatewayPing(a, b)).WithTimeout(10 * time.Second).Should(Succeed())
		g.Eventually(gatewayPing(b, a)).WithTimeout(10 * time.Second).Should(Succeed())
		g.Expect(a.flows(g)).To(ContainSubstring("nw_dst=10.244.2.0/24 actions=dec_ttl,set_field:"))
		g.Expect(a.flows(g)).To(ContainSubstring("set_field:192.168.20.12->tun_dst"))
		g.Expect(a.MustExec(t, "ip", "route", "show", "10.244.2.0/24")).To(ContainSubstring("via 10.244.2.1 dev winnet-gw0"))
		// The peer's admission flows carry its route's cookie: one object, synced in one bundle.
		route := cookieOf(g, a.flows(g), "table=70", "nw_dst=10.244.2.0/24 actions=dec_ttl")
		g.Expect(cookieOf(g, a.flows(g), "table=1", "tun_src=192.168.20.12,nw_src=10.244.2.0/24 actions=goto_table:2")).To(Equal(route))
		g.Expect(cookieOf(g, a.flows(g), "table=1", "tun_src=192.168.20.12,nw_src=192.168.20.12 actions=goto_table:2")).To(Equal(route))
	})

	t.Run("forged tunnel packets are dropped, counted by reason and their source reported", func(t *testing.T) {
		g := NewWithT(t)
		ext := underlay.External()
		start := time.Now()
		before := map[string]float64{}
		for _, reason := range []string{pipeline.TunnelDropPeerElsewhere, pipeline.TunnelDropUnknownSource} {
			before[reason] = dropped(g, reason)
		}
		// rt-b's inner source from the external host, then an inner source no node owns.
		for _, src := range []string{"10.244.2.5", "172.31.255.7"} {
			out, err := ext.Exec(python3, "-c", vxlanForger, "192.168.20.11", "4789", "1", src, "10.244.1.1", "10")
			g.Expect(err).NotTo(HaveOccurred(), out)
		}
		g.Eventually(func(g Gomega) {
			g.Expect(dropped(g, pipeline.TunnelDropPeerElsewhere) - before[pipeline.TunnelDropPeerElsewhere]).To(BeNumerically(">=", 10))
			g.Expect(dropped(g, pipeline.TunnelDropUnknownSource) - before[pipeline.TunnelDropUnknownSource]).To(BeNumerically(">=", 10))
		}).WithTimeout(10*time.Second).Should(Succeed(), "the drops are counted by reason")
		g.Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(server.Client.List(ctx, list)).To(Succeed())
			var notes []string
			for _, ev := range list.Items {
				if ev.Reason == remoteroute.PeerAddressMismatchReason && ev.Regarding.Name == "rt-a" && !ev.CreationTimestamp.Before(&metav1.Time{Time: start.Add(-time.Second)}) {
					notes = append(notes, ev.Note)
				}
			}
			g.Expect(notes).To(ContainElement(And(ContainSubstring("RemoteSubnetRoute rt-b (node IP 192.168.20.12)"),
				ContainSubstring("arrives from "+ext.IP.Addr().String()))))
		}).WithTimeout(10*time.Second).Should(Succeed(), "rt-a names rt-b's route and the address its inner sources came from")
		g.Expect(a.flows(g)).To(ContainSubstring("table=1, priority=0 actions=drop"))
		_, err := a.OVS.Ofctl("del-flows", "br-int", "table=3") // the learned address: other tests count every flow of the round
		g.Expect(err).NotTo(HaveOccurred())
	})

	t.Run("Geneve", func(t *testing.T) {
		g := NewWithT(t)
		for _, n := range []*node{a, b} {
			updateWNN(g, n.name, func(w *networkv1alpha1.WindowsNodeNetwork) {
				w.Spec.Encapsulation.TunnelType = networkv1alpha1.TunnelTypeGeneve
			})
		}
		g.Eventually(func(g Gomega) {
			out, err := a.Exec("ovs-vsctl", "--db=unix:"+a.OVS.DBSocket(), "get", "interface", "winnet-tun0", "type")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(ContainSubstring("geneve"))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		g.Eventually(gatewayPing(a, b)).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("routed without encapsulation", func(t *testing.T) {
		g := NewWithT(t)
		for _, n := range []*node{a, b} {
			updateWNN(g, n.name, func(w *networkv1alpha1.WindowsNodeNetwork) {
				w.Spec.Encapsulation.Mode = networkv1alpha1.EncapsulationModeNoEncap
			})
		}
		g.Eventually(func(g Gomega) {
			g.Expect(a.MustExec(t, "ip", "route", "show", "10.244.2.0/24")).To(ContainSubstring("via 192.168.20.12 dev br-int"))
			g.Expect(a.flows(g)).NotTo(ContainSubstring("tun_dst"))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		g.Eventually(gatewayPing(a, b)).WithTimeout(10 * time.Second).Should(Succeed())
		for _, n := range []*node{a, b} {
			updateWNN(g, n.name, func(w *networkv1alpha1.WindowsNodeNetwork) {
				w.Spec.Encapsulation.Mode = networkv1alpha1.EncapsulationModeEncap
			})
		}
		g.Eventually(gatewayPing(a, b)).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("a new InternalIP moves the tunnel destination", func(t *testing.T) {
		g := NewWithT(t)
		setInternalIP(g, "rt-b", "192.168.20.22")
		g.Eventually(a.flows).WithTimeout(10 * time.Second).Should(ContainSubstring("set_field:192.168.20.22->tun_dst"))
		g.Expect(a.flows(g)).To(ContainSubstring("tun_src=192.168.20.22,nw_src=10.244.2.0/24 actions=goto_table:2"), "admission follows the node IP")
		// The peer's packets still arriving from its old address (replies in flight) are learned into
		// TunnelSourceSeenTable by design; what must be gone is every flow that admits that address.
		g.Expect(withoutTable(a.flows(g), pipeline.TunnelSourceSeenTable)).NotTo(ContainSubstring("tun_src=192.168.20.12"))
		setInternalIP(g, "rt-b", "192.168.20.12")
		g.Eventually(gatewayPing(a, b)).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("a conflicting manual route is reported and not installed", func(t *testing.T) {
		g := NewWithT(t)
		manual := &networkv1alpha1.RemoteSubnetRoute{
			ObjectMeta: metav1.ObjectMeta{Name: "too-wide"},
			Spec:       networkv1alpha1.RemoteSubnetRouteSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"}, NodeIP: "192.168.20.1", Mode: networkv1alpha1.RouteModeRoute},
		}
		g.Expect(server.Client.Create(ctx, manual)).To(Succeed())
		g.Eventually(func(g Gomega) bool {
			g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(manual), manual)).To(Succeed())
			return meta.IsStatusConditionTrue(manual.Status.Conditions, networkv1alpha1.ConflictCondition)
		}).WithTimeout(10 * time.Second).Should(BeTrue())
		g.Consistently(func() string { return a.MustExec(t, "ip", "route", "show", "10.244.0.0/16") }).WithTimeout(2 * time.Second).Should(BeEmpty())
		g.Expect(server.Client.Delete(ctx, manual)).To(Succeed())
		g.Eventually(routesReady("rt-a", 1)).WithTimeout(timeout).Should(Succeed())
		g.Eventually(gatewayPing(a, b)).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("deleting a Node removes its route and flows", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(server.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rt-b"}})).To(Succeed())
		g.Eventually(a.flows).WithTimeout(10 * time.Second).ShouldNot(ContainSubstring("10.244.2.0/24"))
		g.Expect(a.flows(g)).NotTo(ContainSubstring("tun_src="), "nothing of the peer is admitted any more")
		g.Eventually(func() string { return a.MustExec(t, "ip", "route", "show", "10.244.2.0/24") }).WithTimeout(10 * time.Second).Should(BeEmpty())
		g.Eventually(routesReady("rt-a", 0)).WithTimeout(timeout).Should(Succeed())
	})
}

// cookieOf returns the cookie of the one flow whose dump line holds every part.
func cookieOf(g Gomega, flows string, parts ...string) string {
	var found []string
	for _, l := range strings.Split(flows, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			found = append(found, l)
		}
	}
	g.Expect(found).To(HaveLen(1), "flows with %q:\n%s", parts, flows)
	cookie, _, _ := strings.Cut(strings.TrimSpace(found[0]), ",")
	g.Expect(cookie).To(HavePrefix("cookie="))
	return cookie
}

const python3 = "/usr/bin/python3"

// vxlanForger sends argv[6] VXLAN datagrams to argv[1]:argv[2] with VNI argv[3], each carrying a frame
// to the global virtual MAC with an IPv4/UDP packet from argv[4] to argv[5].
const vxlanForger = `
import socket, struct, sys, time
dst, dport, vni, src, idst, count = sys.argv[1:7]
payload = b"winnet-forged"
udp = struct.pack("!HHHH", 40000, 47123, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(idst))
s = 0
for i in range(0, 20, 2): s += (ip[i] << 8) + ip[i+1]
while s >> 16: s = (s & 0xffff) + (s >> 16)
ip = ip[:10] + struct.pack("!H", ~s & 0xffff) + ip[12:]
frame = bytes.fromhex("aabbccddeeff") + bytes.fromhex("020000000099") + b"\x08\x00" + ip + udp
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, 11, 1)  # SO_NO_CHECK: a zero outer UDP checksum, as OVS sends (the veth would offload it)
for _ in range(int(count)):
    sock.sendto(struct.pack("!II", 0x08000000, int(vni) << 8) + frame, (dst, int(dport)))
    time.sleep(0.05)
`

// dropped reads the tunnel admission drop counter of a reason from the process's metrics (the
// agents run in this process).
func dropped(g Gomega, reason string) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "winnet_tunnel_admission_dropped_packets_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	g.Expect(reason).To(BeEmpty(), "no counter for the reason")
	return 0
}
