//go:build linux

package nodenetwork_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/internal/vtep"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// These tests run the real reconciler against a real API server, on a simulated node: a network
// namespace with its own ovs-vswitchd (userspace datapath), an uplink on a shared underlay with an
// external host, real netlink, and the Linux-backed HNS simulator.

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "node network tests", &server, framework.MainOptions{})
}

const (
	converge = 30 * time.Second
	repair   = 5 * time.Second
)

// testNode is a simulated node with its agent running.
type testNode struct {
	*simnode.Node
	external *simnode.Host
	sim      *hns.Sim
	ovsdb    *ovsdb.Client
	net      hostnet.Interface
	// sandboxes is where the test, playing containerd, starts Pod sandboxes.
	sandboxes string
}

func startNode(t *testing.T, name, nodeIP, podCIDR string) *testNode {
	t.Helper()
	g := NewWithT(t)
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.10.0/24"))
	node := underlay.AddNode(t, name, netip.MustParsePrefix(nodeIP), simnode.NodeOptions{StartOVS: true})
	k := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
	g.Expect(server.Client.Create(context.Background(), k)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), k) })
	a := framework.StartAgent(t, server, node)
	return &testNode{Node: node, external: underlay.External(), sim: a.HNS, ovsdb: a.OVSDB, net: a.Net, sandboxes: a.SandboxDir}
}

func nodeNetwork(name, podCIDR, nodeIP string) *networkv1alpha1.WindowsNodeNetwork {
	return &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs:     []networkv1alpha1.CIDR{networkv1alpha1.CIDR(podCIDR)},
			NodeIP:       networkv1alpha1.IPv4Address(nodeIP),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"},
			ServiceCIDRs: []networkv1alpha1.CIDR{"10.96.0.0/12"},
			SNAT:         networkv1alpha1.SNATSpec{ExcludeCIDRs: []networkv1alpha1.CIDR{"172.16.0.0/12"}},
		},
	}
}

func get(name string) func(Gomega) *networkv1alpha1.WindowsNodeNetwork {
	return func(g Gomega) *networkv1alpha1.WindowsNodeNetwork {
		w := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(server.Client.Get(context.Background(), client.ObjectKey{Name: name}, w)).To(Succeed())
		return w
	}
}

func condition(name, typ string) func(Gomega) metav1.Condition {
	return func(g Gomega) metav1.Condition {
		c := meta.FindStatusCondition(get(name)(g).Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "condition %s not set", typ)
		return *c
	}
}

func ready(name string) func(Gomega) metav1.ConditionStatus {
	return func(g Gomega) metav1.ConditionStatus {
		w := get(name)(g)
		c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(w.Status.ObservedGeneration).To(Equal(w.Generation))
		return c.Status
	}
}

func (n *testNode) addrs(g Gomega, dev string) string {
	out, err := n.Exec("ip", "-4", "-o", "addr", "show", "dev", dev)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

func (n *testNode) flows(g Gomega) []string {
	lines, err := n.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	return lines
}

func (n *testNode) trace(g Gomega, flow string, ctNext ...string) string {
	args := []string{"ofproto/trace", "br-int", flow}
	for _, s := range ctNext {
		args = append(args, "--ct-next", s)
	}
	out, err := n.OVS.Appctl(args...)
	g.Expect(err).NotTo(HaveOccurred(), out)
	return out
}

// expectReachable waits until the external host's pings to the node IP are answered: a rebuilt
// datapath takes a moment to pass packets, a lost node never answers.
func (n *testNode) expectReachable(g Gomega, why string) {
	g.Eventually(func(g Gomega) {
		sent, received, err := simnode.Ping(n.external.NS, netip.MustParseAddr("192.168.10.11"), 2)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent))
	}).WithTimeout(10*time.Second).Should(Succeed(), why)
}

func TestNodeNetworkConvergesAndHeals(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := startNode(t, "win-a", "192.168.10.11/24", "10.244.1.0/24")
	g.Expect(server.Client.Create(ctx, nodeNetwork("win-a", "10.244.1.0/24", "192.168.10.11"))).To(Succeed())
	g.Eventually(ready("win-a")).WithTimeout(converge).Should(Equal(metav1.ConditionTrue))

	t.Run("idle, it writes nothing", func(t *testing.T) {
		// The agent reconciles its node network every resync period (1 s here) and on every report;
		// once the status says what is, no write may follow, not even an empty patch: at thousands of
		// nodes each write is one API request and one event to every watcher.
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			before := statusPatches(g)
			time.Sleep(3 * time.Second)
			g.Expect(statusPatches(g)-before).To(BeZero(), "PATCH requests of windowsnodenetworks/status in 3 s")
		}).WithTimeout(20 * time.Second).Should(Succeed())
	})

	t.Run("converged from nothing", func(t *testing.T) {
		g := NewWithT(t)
		w := get("win-a")(g)
		g.Expect(w.Status.Uplink).To(Equal(&networkv1alpha1.PortStatus{Name: "uplink0", MAC: n.UplinkMAC.String(), OFPort: nodenetwork.UplinkOFPort}))
		g.Expect(w.Status.Gateway).To(HaveField("IP", "10.244.1.1"))
		g.Expect(w.Status.Gateway.OFPort).To(Equal(nodenetwork.GatewayOFPort))
		g.Expect(w.Status.Tunnel).To(Equal(&networkv1alpha1.TunnelStatus{Type: "vxlan", Port: 4789, OFPort: nodenetwork.TunnelOFPort,
			VNI: 1, VTEPMAC: vtep.Derived("win-a").String()}))
		g.Expect(w.Status.MTU).To(Equal(int32(1500 - 50)))
		g.Expect(w.Status.HNSNetworkID).NotTo(BeEmpty())
		// The Services' flows come after the node network's: the count includes them at a later resync.
		g.Eventually(func(g Gomega) {
			g.Expect(get("win-a")(g).Status.FlowCount).To(BeNumerically("==", len(n.flows(g))))
		}).WithTimeout(repair).Should(Succeed())
		g.Expect(w.Finalizers).To(ContainElement(nodenetwork.Finalizer))
		// HNS moved the host's address from the uplink to the management vNIC, which the agent
		// renamed to the bridge name so that OVS adopted it as the bridge's LOCAL port; the host is
		// still reachable through OVS. The agent enabled the extension only once the IP was there.
		vnic := n.sim.ManagementVNICIndex(w.Status.HNSNetworkID)
		g.Expect(vnic).NotTo(BeZero())
		br, err := n.net.LinkByName(ctx, "br-int")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(br.Index).To(Equal(vnic), "the bridge interface is the management vNIC HNS created")
		g.Expect(br.MAC.String()).To(Equal(n.UplinkMAC.String()))
		_, err = n.net.LinkByName(ctx, hns.LinuxManagementVNICName("uplink0"))
		g.Expect(err).To(MatchError(hostnet.ErrNotFound), "no interface keeps the vNIC's HNS name")
		g.Expect(n.sim.OrderViolations()).To(BeEmpty())
		g.Expect(eventReasons(g, ctx, "win-a")).To(ContainElements("HNSNetworkCreated", "OVSExtensionEnabled", "ManagementVNICRenamed"))
		g.Expect(n.addrs(g, "br-int")).To(ContainSubstring("192.168.10.11/24"))
		g.Expect(n.addrs(g, "uplink0")).NotTo(ContainSubstring("192.168.10.11"))
		g.Expect(n.MustExec(t, "ip", "route", "show", "default")).To(ContainSubstring("dev br-int"))
		g.Expect(n.addrs(g, "winnet-gw0")).To(ContainSubstring("10.244.1.1/24"))
		n.expectReachable(g, "the external host reaches the node through the bridge")
		tunnel := n.MustExec(t, "ovs-vsctl", "--db=unix:"+n.OVS.DBSocket(), "get", "interface", "winnet-tun0", "type", "options")
		g.Expect(tunnel).To(ContainSubstring("vxlan"))
		g.Expect(tunnel).To(ContainSubstring(`local_ip="192.168.10.11"`))
	})

	t.Run("second pass changes nothing", func(t *testing.T) {
		g := NewWithT(t)
		before, flows := n.ovsdb.MutatingOperations(), n.flows(g)
		time.Sleep(2500 * time.Millisecond) // two resync periods
		g.Expect(n.ovsdb.MutatingOperations()).To(Equal(before))
		g.Expect(n.flows(g)).To(Equal(flows))
	})

	t.Run("the SNAT design holds on the installed pipeline", func(t *testing.T) {
		g := NewWithT(t)
		flows := strings.Join(n.flows(g), "\n")
		g.Expect(flows).To(ContainSubstring("ct(commit,table=110,zone=65520,nat(src=192.168.10.11),exec(set_field:0x40->ct_mark,"))
		for _, excluded := range []string{"10.244.0.0/16", "10.96.0.0/12", "172.16.0.0/12", "192.168.10.11"} {
			// Excluded, and addressed to the gateway (its MAC) like all Pod traffic for the host.
			g.Expect(flows).To(MatchRegexp(`table=70, priority=180,ip,reg0=0x2/0xffff,nw_dst=` + regexp.QuoteMeta(excluded) +
				` actions=set_field:[0-9a-f:]{17}->eth_dst,goto_table:80`))
		}
		// Host traffic to the outside leaves on the uplink; replies from outside go through
		// conntrack and, as no Pod connection is theirs, to the host.
		g.Expect(n.trace(g, "in_port=LOCAL,ip,nw_src=192.168.10.11,nw_dst=8.8.8.8,nw_ttl=64")).To(ContainSubstring(fmt.Sprintf("output:%d", nodenetwork.UplinkOFPort)))
		g.Expect(n.trace(g, fmt.Sprintf("in_port=%d,tcp,nw_src=8.8.8.8,nw_dst=192.168.10.11,nw_ttl=64", nodenetwork.UplinkOFPort), "trk,est")).
			To(MatchRegexp(`ct\(table=31,zone=65520,nat\)(.|\n)*31\. ip,reg0=0x3/0xffff, priority 190, cookie 0x[0-9a-f]+\n\s+LOCAL`))
	})

	t.Run("a Pod reaches the outside through SNAT and gets its replies", func(t *testing.T) {
		g := NewWithT(t)
		// A Pod as the Pod-networking reconciler will make it: an HNS endpoint attached to the Pod's
		// namespace, its host end on the bridge, and its flows. Real packets then walk the pipeline.
		w := get("win-a")(g)
		podNS := n.NS + "-p1"
		simnode.Exec("", "ip", "netns", "add", podNS)
		t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", podNS) })
		podMAC, _ := net.ParseMAC("02:42:0a:f4:01:05")
		ep, err := n.sim.CreateEndpoint(ctx, hns.EndpointSpec{
			Name: "pod1", NetworkID: w.Status.HNSNetworkID, IP: netip.MustParseAddr("10.244.1.5"), MAC: podMAC,
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.sim.AttachEndpoint(ctx, ep.ID, "/run/netns/"+podNS)).To(Succeed())
		g.Expect(hns.StartSandbox(n.sandboxes, "/run/netns/"+podNS)).To(Succeed()) // its vNIC appears
		g.Eventually(func() error { _, err := n.net.LinkByName(ctx, hns.LinuxInterfaceName("pod1")); return err }).Should(Succeed())
		db := "--db=unix:" + n.OVS.DBSocket()
		n.MustExec(t, "ovs-vsctl", db, "add-port", "br-int", hns.LinuxInterfaceName("pod1"), "--", "set", "interface", hns.LinuxInterfaceName("pod1"), "ofport_request=10")
		hostEnd, err := n.net.LinkByName(ctx, hns.LinuxInterfaceName("pod1"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.net.SetSwitchPort(ctx, hostEnd.Index, true)).To(Succeed())
		gwMAC, _ := net.ParseMAC(w.Status.Gateway.MAC)
		node := pipeline.Node{GatewayMAC: gwMAC}
		var text []string
		for _, f := range node.PodFlows(pipeline.Pod{OFPort: 10, MAC: podMAC, IP: netip.MustParseAddr("10.244.1.5")}) {
			text = append(text, f.String())
		}
		file := filepath.Join(t.TempDir(), "pod-flows")
		g.Expect(os.WriteFile(file, []byte(strings.Join(text, "\n")+"\n"), 0o600)).To(Succeed())
		out, err := n.OVS.Ofctl("-O", "OpenFlow15", "add-flows", "br-int", file)
		g.Expect(err).NotTo(HaveOccurred(), out)

		for _, dst := range []string{"192.168.10.254", "192.168.10.11", "10.244.1.1"} {
			g.Eventually(func(g Gomega) {
				sent, received, err := simnode.Ping(podNS, netip.MustParseAddr(dst), 2)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(received).To(Equal(sent))
			}).WithTimeout(10*time.Second).Should(Succeed(), "the Pod reaches %s", dst)
		}
		// The connection to the external host was SNATed to the node IP in the pipeline's zone.
		ct, err := n.OVS.Appctl("dpctl/dump-conntrack", "zone=65520")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ct).To(MatchRegexp(`icmp,orig=\(src=10\.244\.1\.5,dst=192\.168\.10\.254,.*reply=\(src=192\.168\.10\.254,dst=192\.168\.10\.11,.*mark=64`))
		g.Expect(ct).NotTo(MatchRegexp(`orig=\(src=10\.244\.1\.5,dst=192\.168\.10\.11,.*reply=\(src=192\.168\.10\.11,dst=192\.168\.10\.11`), "Pod to node IP is not SNATed")
		n.MustExec(t, "ovs-vsctl", db, "del-port", "br-int", hns.LinuxInterfaceName("pod1"))
		_, _ = n.OVS.Ofctl("-O", "OpenFlow15", "del-flows", "br-int", "cookie=0/-1")
	})

	t.Run("drift is repaired", func(t *testing.T) {
		db := "--db=unix:" + n.OVS.DBSocket()
		for _, tc := range []struct {
			name  string
			drift []string
			check func(g Gomega)
		}{
			{"deleted gateway port", []string{"ovs-vsctl", db, "del-port", "br-int", "winnet-gw0"}, func(g Gomega) {
				g.Expect(n.addrs(g, "winnet-gw0")).To(ContainSubstring("10.244.1.1/24"))
			}},
			{"deleted tunnel port", []string{"ovs-vsctl", db, "del-port", "br-int", "winnet-tun0"}, func(g Gomega) {
				out, err := n.Exec("ovs-vsctl", db, "get", "interface", "winnet-tun0", "ofport")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(strings.TrimSpace(out)).To(Equal(fmt.Sprint(nodenetwork.TunnelOFPort)))
			}},
			{"deleted flows", []string{"ovs-ofctl", "-O", "OpenFlow15", "del-flows", "br-int"}, func(g Gomega) {
				g.Expect(len(n.flows(g))).To(BeNumerically("==", get("win-a")(g).Status.FlowCount))
				g.Expect(strings.Join(n.flows(g), "\n")).To(ContainSubstring("nat(src=192.168.10.11)"))
			}},
			{"deleted gateway address", []string{"ip", "addr", "del", "10.244.1.1/24", "dev", "winnet-gw0"}, func(g Gomega) {
				g.Expect(n.addrs(g, "winnet-gw0")).To(ContainSubstring("10.244.1.1/24"))
			}},
			{"node IP removed from the bridge interface", []string{"ip", "addr", "del", "192.168.10.11/24", "dev", "br-int"}, func(g Gomega) {
				g.Expect(n.addrs(g, "br-int")).To(ContainSubstring("192.168.10.11/24"))
				g.Expect(eventReasons(g, ctx, "win-a")).To(ContainElement("HostIPRestored"))
				out, err := n.Exec("ip", "route", "show", "default")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(ContainSubstring("via 192.168.10.1 dev br-int"))
			}},
			{"deleted Pod CIDR route", []string{"ip", "route", "del", "10.244.1.0/24"}, func(g Gomega) {
				out, err := n.Exec("ip", "route", "show", "10.244.1.0/24")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(ContainSubstring("dev winnet-gw0"))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				if tc.drift[0] == "ovs-ofctl" {
					_, err := n.OVS.Ofctl(tc.drift[1:]...)
					g.Expect(err).NotTo(HaveOccurred())
				} else {
					n.MustExec(t, tc.drift...)
				}
				g.Eventually(tc.check).WithTimeout(repair).WithPolling(100 * time.Millisecond).Should(Succeed())
				g.Eventually(ready("win-a")).WithTimeout(repair).Should(Equal(metav1.ConditionTrue))
			})
		}
	})

	t.Run("an extension disabled on the surviving network is enabled again", func(t *testing.T) {
		g := NewWithT(t)
		id := get("win-a")(g).Status.HNSNetworkID
		g.Expect(n.sim.DisableOVSExtension(id)).To(Succeed())
		g.Eventually(func(g Gomega) bool {
			on, err := n.sim.OVSExtensionEnabled(ctx, id)
			g.Expect(err).NotTo(HaveOccurred())
			return on
		}).WithTimeout(repair).Should(BeTrue())
		g.Expect(get("win-a")(g).Status.HNSNetworkID).To(Equal(id), "the network is kept")
		g.Expect(n.sim.OrderViolations()).To(BeEmpty())
	})

	t.Run("live changes converge without restart", func(t *testing.T) {
		g := NewWithT(t)
		w := get("win-a")(g)
		w.Spec.Encapsulation.TunnelType = networkv1alpha1.TunnelTypeGeneve
		w.Spec.Encapsulation.VNI = 4096
		w.Spec.SNAT.Enabled = ptr.To(false)
		w.Spec.Encapsulation.MTU = 1400
		g.Expect(server.Client.Update(ctx, w)).To(Succeed())
		g.Eventually(func(g Gomega) {
			w := get("win-a")(g)
			g.Expect(w.Status.ObservedGeneration).To(Equal(w.Generation))
			g.Expect(w.Status.Tunnel).To(Equal(&networkv1alpha1.TunnelStatus{Type: "geneve", Port: 6081, OFPort: nodenetwork.TunnelOFPort,
				VNI: 4096, VTEPMAC: vtep.Derived("win-a").String()}))
			g.Expect(w.Status.MTU).To(Equal(int32(1400)))
		}).WithTimeout(repair).Should(Succeed())
		g.Expect(n.MustExec(t, "ovs-vsctl", "--db=unix:"+n.OVS.DBSocket(), "get", "interface", "winnet-tun0", "type")).To(ContainSubstring("geneve"))
		g.Expect(strings.Join(n.flows(g), "\n")).NotTo(ContainSubstring("nat(src=192.168.10.11)"), "no SNAT to the node IP (Services SNAT to the gateway IP, whatever spec.snat)")
		g.Expect(n.MustExec(t, "ip", "link", "show", "winnet-gw0")).To(ContainSubstring("mtu 1400"))
	})

	t.Run("a reboot heals itself", func(t *testing.T) {
		g := NewWithT(t)
		// What a Windows reboot leaves: no HNS network and no management vNIC, the host IP back on
		// the uplink, a stale bridge in OVS's database. The agent keeps running meanwhile, as it
		// would start at boot: whichever of these it sees first, it must end up rebuilding the node
		// network.
		oldNetwork := get("win-a")(g).Status.HNSNetworkID
		g.Expect(n.sim.Reboot(ctx)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(get("win-a")(g).Status.HNSNetworkID).NotTo(Equal(oldNetwork), "the HNS network is rebuilt")
			g.Expect(ready("win-a")(g)).To(Equal(metav1.ConditionTrue))
			g.Expect(n.addrs(g, "br-int")).To(ContainSubstring("192.168.10.11/24"))
		}).WithTimeout(converge).Should(Succeed())
		g.Expect(n.addrs(g, "uplink0")).NotTo(ContainSubstring("192.168.10.11"))
		g.Eventually(func(g Gomega) []string { return eventReasons(g, ctx, "win-a") }).WithTimeout(repair).Should(ContainElement(networkv1alpha1.HostRebootedReason))
		g.Expect(n.sim.OrderViolations()).To(BeEmpty())
		n.expectReachable(g, "the rebuilt node is reachable through the bridge")
	})

	t.Run("deleting gives the host its network back", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(server.Client.Delete(ctx, get("win-a")(g))).To(Succeed())
		g.Eventually(func() bool {
			return server.Client.Get(ctx, client.ObjectKey{Name: "win-a"}, &networkv1alpha1.WindowsNodeNetwork{}) != nil
		}).WithTimeout(converge).Should(BeTrue())
		g.Expect(n.addrs(g, "uplink0")).To(ContainSubstring("192.168.10.11/24"))
		g.Expect(n.MustExec(t, "ip", "route", "show", "default")).To(ContainSubstring("via 192.168.10.1 dev uplink0"))
		_, err := n.Exec("ip", "link", "show", "br-int")
		g.Expect(err).To(HaveOccurred(), "the bridge is gone")
		_, err = n.sim.GetNetworkByName(ctx, "winnet")
		g.Expect(err).To(MatchError(hns.ErrNotFound))
		n.expectReachable(g, "the node is reachable on its uplink again")
	})
}

func TestInvalidRuntimeFacts(t *testing.T) {
	ctx := context.Background()
	b := startNode(t, "win-b", "192.168.10.12/24", "10.244.2.0/24")

	t.Run("Pod CIDR not matching the Node", func(t *testing.T) {
		g := NewWithT(t)
		w := nodeNetwork("win-b", "10.244.9.0/24", "192.168.10.12")
		g.Expect(server.Client.Create(ctx, w)).To(Succeed())
		g.Eventually(condition("win-b", networkv1alpha1.HostSwitchReadyCondition)).WithTimeout(converge).Should(SatisfyAll(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", networkv1alpha1.InvalidSpecReason),
			HaveField("Message", ContainSubstring("does not match the Node's Pod CIDRs [10.244.2.0/24]")),
		))
		g.Expect(condition("win-b", networkv1alpha1.ReadyCondition)(g).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(server.Client.Delete(ctx, w)).To(Succeed())
		g.Eventually(func() bool {
			return server.Client.Get(ctx, client.ObjectKey{Name: "win-b"}, &networkv1alpha1.WindowsNodeNetwork{}) != nil
		}).WithTimeout(converge).Should(BeTrue())
	})

	t.Run("adapter held by another HNS network", func(t *testing.T) {
		// The adapter holding the node IP is the management vNIC of another network (an L2Bridge
		// one, Antrea issue 2213): HNS answers 0x57, and the condition names that network.
		g := NewWithT(t)
		other, err := b.sim.CreateTransparentNetwork(ctx, hns.NetworkSpec{Name: "l2bridge", AdapterName: "uplink0",
			Subnet: netip.MustParsePrefix("10.250.0.0/24"), Gateway: netip.MustParseAddr("10.250.0.1")})
		g.Expect(err).NotTo(HaveOccurred())
		w := nodeNetwork("win-b", "10.244.2.0/24", "192.168.10.12")
		g.Expect(server.Client.Create(ctx, w)).To(Succeed())
		g.Eventually(condition("win-b", networkv1alpha1.HostSwitchReadyCondition)).WithTimeout(converge).Should(SatisfyAll(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", networkv1alpha1.HNSNetworkFailedReason),
			HaveField("Message", And(ContainSubstring("0x57"), ContainSubstring(`is the management vNIC of network "l2bridge"`))),
		))
		g.Expect(server.Client.Delete(ctx, w)).To(Succeed())
		g.Eventually(func() bool {
			return server.Client.Get(ctx, client.ObjectKey{Name: "win-b"}, &networkv1alpha1.WindowsNodeNetwork{}) != nil
		}).WithTimeout(converge).Should(BeTrue())
		g.Expect(b.sim.DeleteNetwork(ctx, other.ID)).To(Succeed())
		g.Expect(b.addrs(g, "uplink0")).To(ContainSubstring("192.168.10.12/24"), "the other network gave the adapter back")
	})

	t.Run("uplink missing", func(t *testing.T) {
		g := NewWithT(t)
		w := nodeNetwork("win-b", "10.244.2.0/24", "192.168.10.12")
		w.Spec.Uplink.Interface = "Ethernet 9"
		g.Expect(server.Client.Create(ctx, w)).To(Succeed())
		g.Eventually(condition("win-b", networkv1alpha1.HostSwitchReadyCondition)).WithTimeout(converge).Should(SatisfyAll(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", networkv1alpha1.UplinkNotFoundReason),
			HaveField("Message", ContainSubstring(`no uplink adapter (name "Ethernet 9"`)),
		))
		g.Expect(condition("win-b", networkv1alpha1.ReadyCondition)(g).Status).To(Equal(metav1.ConditionFalse))
	})
}

// eventReasons returns the reasons of the Events about the node's WindowsNodeNetwork.
func eventReasons(g Gomega, ctx context.Context, name string) []string {
	list := &eventsv1.EventList{}
	g.Expect(server.Client.List(ctx, list, client.InNamespace("default"))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// statusPatches is the API server's count of PATCH requests to windowsnodenetworks/status so far
// (apiserver_request_total, empty patches included).
func statusPatches(g Gomega) float64 {
	cs, err := kubernetes.NewForConfig(server.Config)
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	var total float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="windowsnodenetworks"`) ||
			!strings.Contains(line, `subresource="status"`) || !strings.Contains(line, `verb="PATCH"`) {
			continue
		}
		var v float64
		_, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
		g.Expect(err).NotTo(HaveOccurred(), line)
		total += v
	}
	return total
}
