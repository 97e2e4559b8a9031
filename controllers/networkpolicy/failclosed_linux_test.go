package networkpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// failClosedSwitch is a real ovs-vswitchd (userspace datapath) holding the base pipeline of a node
// with testInputs' two local Pods (web, port 10, and db, port 11, both team a) and routes to the
// remote Pods (10.244.2.0/24, the clients) and to 10.245.0.0/16 through the tunnel.
type failClosedSwitch struct {
	o     *ovstest.OVS
	node  pipeline.Node
	fixed []openflow.Flow
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

var webPod = pipeline.Pod{OFPort: 10, MAC: mustMAC("02:42:0a:f4:01:05"), IP: netip.MustParseAddr("10.244.1.5")}

func startFailClosedSwitch(t *testing.T) *failClosedSwitch {
	n := pipeline.Node{
		NodeIP: netip.MustParseAddr("192.168.10.11"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24"),
		GatewayIP: netip.MustParseAddr("10.244.1.1"), GatewayMAC: mustMAC("02:42:0a:f4:01:01"), GatewayOFPort: 2, UplinkOFPort: 3,
		TunnelOFPort: 1, TunnelUDPPort: 4789, VNI: 1, VTEPMAC: mustMAC("0e:5e:00:00:00:0b"),
		SNAT: true, NoSNAT: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")},
	}
	db := pipeline.Pod{OFPort: 11, MAC: mustMAC("02:42:0a:f4:01:06"), IP: netip.MustParseAddr("10.244.1.6")}
	o := ovstest.Start(t, ovstest.Options{})
	o.AddBridge(t, "br-int")
	for _, p := range []struct {
		name   string
		ofport uint32
		opts   []string
	}{
		{"winnet-tun0", n.TunnelOFPort, []string{"type=vxlan", "options:remote_ip=flow", "options:key=flow", "options:local_ip=" + n.NodeIP.String()}},
		{"winnet-gw0", n.GatewayOFPort, []string{"type=internal"}},
		{"uplink0", n.UplinkOFPort, []string{"type=internal"}},
		{"web", webPod.OFPort, []string{"type=internal"}},
		{"db", db.OFPort, []string{"type=internal"}},
	} {
		o.AddPort(t, "br-int", p.name, p.ofport, p.opts...)
	}
	route := func(cidr, nodeIP string, peer uint64) pipeline.RemoteRoute {
		return pipeline.RemoteRoute{CIDR: netip.MustParsePrefix(cidr), Tunnel: true, NodeIP: netip.MustParseAddr(nodeIP), VNI: 1,
			DstMAC: pipeline.GlobalVirtualMAC, GatewayIP: netip.MustParsePrefix(cidr).Addr().Next(), Peer: peer}
	}
	fixed := slices.Concat(n.BaseFlows(), n.PodFlows(webPod), n.PodFlows(db), n.RouteFlows(route("10.244.2.0/24", "192.168.10.12", 2)),
		n.RouteFlows(route("10.245.0.0/16", "192.168.10.13", 3)))
	return &failClosedSwitch{o: o, node: n, fixed: fixed}
}

// install replaces the switch's flows with the base pipeline and the ClusterNetworkPolicies'
// flows, as the agent compiles them.
func (s *failClosedSwitch) install(t *testing.T, d ClusterDesired) {
	var text []string
	for _, f := range append(slices.Clone(s.fixed), s.node.ClusterPolicyFlows(d.Policy)...) {
		text = append(text, f.String())
	}
	file := filepath.Join(t.TempDir(), "flows")
	if err := os.WriteFile(file, []byte(strings.Join(text, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.o.MustOfctl(t, "-O", "OpenFlow15", "--bundle", "replace-flows", "br-int", file)
}

// egress traces a new TCP connection from web to dst:port and returns the trace.
func (s *failClosedSwitch) egress(t *testing.T, dst string, port int) string {
	flow := fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64,tp_dst=%d", webPod.MAC, s.node.GatewayMAC, webPod.IP, dst, port)
	out, err := s.o.Appctl("ofproto/trace", "br-int", flow, "--ct-next", "trk,new", "--ct-next", "trk,new")
	if err != nil {
		t.Fatalf("tracing %s: %v: %s", flow, err, out)
	}
	return out
}

// droppedAt is the priority of the AdminEgressRule flow that dropped the traced packet, 0 when
// none did.
func droppedAt(trace string) int {
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^\s*%d\. [^\n]*, priority (\d+)(, cookie 0x[0-9a-f]+)?\n\s+drop`, pipeline.AdminEgressRuleTable)).FindStringSubmatch(trace)
	if m == nil {
		return 0
	}
	var p int
	fmt.Sscan(m[1], &p)
	return p
}

// TestFailClosedPackets walks packets, with ofproto/trace in a real switch, through the flows the
// agent compiles of ClusterNetworkPolicy rules it cannot realise as written: what the Deny rule
// denies is dropped (a superset of it, from its subjects only), and an Accept rule in the same
// case accepts nothing it did not ask for.
func TestFailClosedPackets(t *testing.T) {
	s := startFailClosedSwitch(t)
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	teamB := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "b"})}
	clients := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Pods: &cnpv1beta1.NamespacedPod{PodSelector: *sel(map[string]string{"app": "client"})}}
	tcp := func(port int32) cnpv1beta1.ClusterNetworkPolicyProtocol {
		return cnpv1beta1.ClusterNetworkPolicyProtocol{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Number: port}}}
	}
	egress := func(action cnpv1beta1.ClusterNetworkPolicyRuleAction, to cnpv1beta1.ClusterNetworkPolicyEgressPeer, protocols ...cnpv1beta1.ClusterNetworkPolicyProtocol) cnpv1beta1.ClusterNetworkPolicyEgressRule {
		return cnpv1beta1.ClusterNetworkPolicyEgressRule{Action: action, To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{to}, Protocols: protocols}
	}
	const (
		accept = cnpv1beta1.ClusterNetworkPolicyRuleActionAccept
		deny   = cnpv1beta1.ClusterNetworkPolicyRuleActionDeny
	)
	top := int(pipeline.ClusterPriorityHighest)
	// A client's address, and what no rule names.
	client, elsewhere := "10.244.2.5", "10.244.2.200"

	t.Run("a Deny rule with an unknown protocol field drops every port of its peers", func(t *testing.T) {
		g := NewWithT(t)
		s.install(t, ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{cnp("deny", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egress(deny, clients, tcp(80), cnpv1beta1.ClusterNetworkPolicyProtocol{})}})}, testInputs()))
		g.Expect(droppedAt(s.egress(t, client, 80))).To(Equal(top))
		g.Expect(droppedAt(s.egress(t, client, 443))).To(Equal(top), "the port the unknown field may name")
		g.Expect(droppedAt(s.egress(t, elsewhere, 443))).To(BeZero(), "only its peers")
	})

	t.Run("an Accept rule with an unknown protocol field alone is not realised: the Deny after it decides", func(t *testing.T) {
		g := NewWithT(t)
		s.install(t, ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{cnp("accept", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egress(accept, clients, cnpv1beta1.ClusterNetworkPolicyProtocol{}), egress(deny, clients, tcp(80))}})}, testInputs()))
		g.Expect(droppedAt(s.egress(t, client, 80))).To(Equal(top - 1))
		trace := s.egress(t, client, 443)
		g.Expect(droppedAt(trace)).To(BeZero())
		g.Expect(trace).NotTo(ContainSubstring("priority 60000"), "no flow of the Accept rule")
	})

	t.Run("a rule of an unknown action drops its peers and ports", func(t *testing.T) {
		g := NewWithT(t)
		s.install(t, ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{cnp("quarantine", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egress("Quarantine", clients, tcp(80))}})}, testInputs()))
		g.Expect(droppedAt(s.egress(t, client, 80))).To(Equal(top))
		g.Expect(droppedAt(s.egress(t, client, 443))).To(BeZero())
	})

	t.Run("Deny rules beyond the priority band drop below it, after the rules of the band", func(t *testing.T) {
		g := NewWithT(t)
		// The band is filled by rules without subjects on this node (no flows here) and an Accept
		// of TCP 80 to the clients with; the Deny beyond it is the last rule of the tier, and the
		// Accept beyond it is not realised.
		var policies []cnpv1beta1.ClusterNetworkPolicy
		filler := make([]cnpv1beta1.ClusterNetworkPolicyEgressRule, 100)
		for i := range filler {
			filler[i] = egress(deny, clients)
		}
		policies = append(policies, cnp("first", cnpv1beta1.AdminTier, 0, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egress(accept, clients, tcp(80))}}))
		for i := 0; i*100 < clusterRulesPerBand; i++ {
			policies = append(policies, cnp(fmtNum(i), cnpv1beta1.AdminTier, 1, teamB, cnpv1beta1.ClusterNetworkPolicySpec{Egress: filler}))
		}
		policies = append(policies, cnp("last", cnpv1beta1.AdminTier, 2, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egress(accept, clients, tcp(443)), egress(deny, clients, tcp(22))}}))
		d := ComputeCluster(policies, testInputs())
		g.Expect(d.Refused["last"]).To(HaveLen(2))
		s.install(t, d)
		g.Expect(droppedAt(s.egress(t, client, 80))).To(BeZero(), "the Accept in the band decides first")
		g.Expect(droppedAt(s.egress(t, client, 22))).To(Equal(int(pipeline.ClusterPriorityBeyondBand)))
		g.Expect(droppedAt(s.egress(t, client, 443))).To(Equal(int(pipeline.ClusterPriorityBeyondBand)), "the Accept beyond the band is not realised")
	})

	t.Run("a Deny rule beyond the part limit drops every port of its peers", func(t *testing.T) {
		g := NewWithT(t)
		in := testInputs()
		for i := range pipeline.MaxClusterSubRules + 1 {
			in.Pods = append(in.Pods, PodInfo{Namespace: "y", Name: fmt.Sprintf("many-%d", i), Labels: map[string]string{"app": "many"},
				IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)})}, Ports: []NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: uint16(1000 + i)}}})
		}
		many := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Pods: &cnpv1beta1.NamespacedPod{PodSelector: *sel(map[string]string{"app": "many"})}}
		s.install(t, ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{cnp("named", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egress(deny, many, cnpv1beta1.ClusterNetworkPolicyProtocol{DestinationNamedPort: "http"})}})}, in))
		g.Expect(droppedAt(s.egress(t, "10.245.0.7", 1007))).To(Equal(top), "its named port")
		g.Expect(droppedAt(s.egress(t, "10.245.0.7", 22))).To(Equal(top), "every other port of its peers")
		g.Expect(droppedAt(s.egress(t, client, 1007))).To(BeZero(), "only its peers")
	})
}
