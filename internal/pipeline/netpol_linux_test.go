package pipeline

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/ovstest"
)

// loadPolicy adds testPolicy's flows to a loaded pipeline.
func loadPolicy(t *testing.T, o *ovstest.OVS, n Node) []string {
	t.Helper()
	flows := strs(n.PolicyFlows(testPolicy()))
	file := filepath.Join(t.TempDir(), "policy")
	if err := os.WriteFile(file, []byte(strings.Join(flows, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.MustOfctl(t, "-O", "OpenFlow15", "--bundle", "add-flows", "br-int", file)
	return flows
}

func TestPolicyInstallsAsRendered(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	o, base := loadPipeline(t, n)
	flows := loadPolicy(t, o, n)
	got, err := o.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	want := slices.Concat(base, flows)
	slices.Sort(want)
	g.Expect(got).To(Equal(want), "ovs-ofctl dump-flows must print exactly what the builders render")
}

// TestPolicyPaths walks new and established connections through testPolicy with ofproto/trace:
// pod1 (10.244.1.5, port 10) is isolated for ingress, pod2 (10.244.1.6, port 11) for egress.
func TestPolicyPaths(t *testing.T) {
	n := testNode()
	o, _ := loadPipeline(t, n)
	loadPolicy(t, o, n)
	gw := n.GatewayMAC.String()
	fromPod2 := func(proto, dst, extra string) string {
		dmac := gw
		if dst == pod1.IP.String() {
			dmac = pod1.MAC.String()
		}
		return fmt.Sprintf("in_port=11,%s,dl_src=%s,dl_dst=%s,nw_src=10.244.1.6,nw_dst=%s,nw_ttl=64%s", proto, pod2.MAC, dmac, dst, extra)
	}
	// A remote Pod's packet comes from the peer that owns its address (tunnel admission).
	fromTunnel := func(proto, src, extra string) string {
		peer, vni := remote.NodeIP, remote.VNI
		if remote3.CIDR.Contains(netip.MustParseAddr(src)) {
			peer, vni = remote3.NodeIP, remote3.VNI
		}
		return fmt.Sprintf("in_port=1,%s,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=10.244.1.5,nw_ttl=64,tun_id=%d,tun_src=%s,tun_dst=192.168.10.11%s",
			proto, gw, GlobalVirtualMAC, src, vni, peer, extra)
	}
	newConn := []string{"trk,new", "trk,new"}
	deniedEgress := `60\. ip,in_port=11, priority 200\n\s+drop`
	deniedIngress := `100\. ip,reg1=0xa, priority 200\n\s+drop`
	// Traces print "drop" after every ct() clone too: a packet allowed hits neither default-deny
	// flow and is output.
	notDenied := []string{"60. ip,in_port=11, priority 200", "100. ip,reg1=0xa, priority 200", "Datapath actions: drop"}
	cases := []traceCase{
		{
			name: "An egress-isolated Pod reaches an allowed Pod on the allowed port (both rules' conjunctions complete)",
			flow: fromPod2("tcp", "10.244.1.5", ",tp_dst=8080"), ctNext: newConn,
			// The egress rule's conj_id flow for pod2 (counted under 9), the ingress rule's own.
			want:   []string{`conj_id=3,ip,in_port=11, priority 191\n\s+set_field:0x9->reg8`, `conj_id=2,ip, priority 190\n\s+set_field:0x2->reg9`, "-> output port is 10"},
			reject: notDenied,
		},
		{
			name: "An egress-isolated Pod is refused another port of an allowed destination",
			flow: fromPod2("tcp", "10.244.1.5", ",tp_dst=9090"), ctNext: newConn,
			want: []string{deniedEgress, "Datapath actions: drop"},
		},
		{
			name: "An egress rule with any port allows UDP to its CIDR",
			flow: fromPod2("udp", "192.168.10.50", ",udp_dst=5353"), ctNext: newConn,
			want:   []string{`conj_id=4`},
			reject: notDenied,
		},
		{
			name: "An egress-isolated Pod is refused what no rule allows",
			flow: fromPod2("tcp", "8.8.8.8", ",tp_dst=443"), ctNext: newConn,
			want: []string{deniedEgress},
		},
		{
			name: "An egress-isolated Pod still reaches its own node",
			flow: fromPod2("tcp", "192.168.10.11", ",tp_dst=10250"), ctNext: newConn,
			want:   []string{`50\. ip,reg0=0x2/0xffff,nw_dst=192\.168\.10\.11, priority 210`},
			reject: notDenied,
		},
		{
			name: "An egress ipBlock with an exception: an address of the CIDR gets its class and is allowed",
			flow: fromPod2("tcp", "8.8.4.4", ",tp_dst=443"), ctNext: newConn,
			want:   []string{`48\. ip,nw_dst=8\.0\.0\.0/8, priority 108`, `conj_id=6`},
			reject: notDenied,
		},
		{
			name: "An egress ipBlock with an exception: the exception gets a class of its own and is refused",
			flow: fromPod2("tcp", "8.8.8.8", ",tp_dst=443"), ctNext: newConn,
			want:   []string{`48\. ip,nw_dst=8\.8\.8\.8, priority 132`, deniedEgress},
			reject: []string{`conj_id=6`},
		},
		{
			name: "Replies and established packets skip egress policy",
			flow: fromPod2("tcp", "8.8.8.8", ",tp_dst=443"), ctNext: []string{"trk,est"},
			want:   []string{`46\. ct_state=-new\+est\+trk,ct_mark=0/0x10,ip, priority 64000`},
			reject: notDenied,
		},
		{
			name: "A remote Pod reaches an ingress-isolated Pod on a port inside an endPort range",
			flow: fromTunnel("tcp", "10.244.2.7", ",tp_dst=82"), ctNext: newConn,
			want:   []string{`conj_id=1`, "-> output port is 10"},
			reject: notDenied,
		},
		{
			name: "A remote Pod is refused a port outside the range",
			flow: fromTunnel("tcp", "10.244.2.7", ",tp_dst=86"), ctNext: newConn,
			want: []string{deniedIngress, "Datapath actions: drop"},
		},
		{
			name: "A remote Pod reaches the allowed UDP port",
			flow: fromTunnel("udp", "10.244.2.7", ",udp_dst=53"), ctNext: newConn,
			want:   []string{`conj_id=1`, "-> output port is 10"},
			reject: notDenied,
		},
		{
			name: "An established connection survives: ingress evaluates only new connections",
			flow: fromTunnel("tcp", "10.244.2.7", ",tp_dst=86"), ctNext: []string{"trk,est", "trk,est"},
			want:   []string{`82\. ct_state=-new\+est\+trk,ct_mark=0/0x10,ip, priority 64000`, "-> output port is 10"},
			reject: notDenied,
		},
		{
			name: "A source outside every rule is refused",
			flow: fromTunnel("tcp", "10.244.3.7", ",tp_dst=80"), ctNext: newConn,
			want: []string{deniedIngress},
		},
		{
			name: "An ingress ipBlock with an exception admits an address of its CIDR",
			flow: fromTunnel("tcp", "10.244.3.8", ",tp_dst=80"), ctNext: newConn,
			want:   []string{`85\. ip,nw_src=10\.244\.3\.0/24, priority 124`, `conj_id=5`, "-> output port is 10"},
			reject: notDenied,
		},
		{
			name: "An ingress ipBlock with an exception refuses the exception",
			flow: fromTunnel("tcp", "10.244.3.7", ",tp_dst=80"), ctNext: newConn,
			want:   []string{`85\. ip,nw_src=10\.244\.3\.7, priority 132`, deniedIngress},
			reject: []string{`conj_id=5`},
		},
		{
			name:   "The node (through the gateway, from the gateway address) reaches an ingress-isolated Pod",
			flow:   fmt.Sprintf("in_port=2,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.1,nw_dst=10.244.1.5,tp_dst=8080,nw_ttl=64", gw, pod1.MAC),
			ctNext: newConn,
			want:   []string{`90\. ip,reg0=0x1/0xffff,nw_src=10\.244\.1\.1, priority 210`, "-> output port is 10"},
			reject: notDenied,
		},
		{
			name: "Traffic with the node's gateway address from the tunnel is not the node (Antrea issue 280): no peer owns it",
			flow: fromTunnel("tcp", "10.244.1.1", ",tp_dst=8080"), ctNext: newConn,
			want: []string{`1\. tun_id=0x1000,tun_src=192\.168\.10\.12, priority 195\n\s+drop`},
		},
		{
			name: "Traffic a remote node masqueraded to its gateway address is not this node",
			flow: fromTunnel("tcp", "10.244.2.1", ",tp_dst=8080"), ctNext: newConn,
			want: []string{deniedIngress},
		},
		{
			name:   "An ingress-isolated Pod is never blocked from itself",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.1.5,tp_dst=8080,nw_ttl=64", pod1.MAC, pod1.MAC),
			ctNext: newConn,
			// The base pipeline does not hairpin (OVS skips output to the input port): the policy lets
			// the packet through, which is what this case is about.
			want:   []string{`90\. ip,reg1=0xa,nw_src=10\.244\.1\.5, priority 210`, "skipping output to input port"},
			reject: notDenied[:2],
		},
	}
	runTraces(t, o, cases)
}

// TestPolicyEstablishedServiceConnections walks established packets of Service connections through
// the egress tables, with their conntrack state and mark as Windows would give them. Windows reports
// every later UDP packet of a committed connection as established, and a Service connection is
// committed by its DNAT before policy refuses it: only a connection policy admitted (and marked so
// at ConntrackCommit) may skip the rules. The userspace datapath keeps such packets +new, so a test-
// only flow starts the trace at the first egress policy stage (AdminEgressRule) with the state given
// (real packets never reach table 0 tracked); an admitted one goes on through EgressIncarnation.
func TestPolicyEstablishedServiceConnections(t *testing.T) {
	n := testNode()
	o, _ := loadPipeline(t, n)
	loadPolicy(t, o, n)
	file := filepath.Join(t.TempDir(), "start")
	if err := os.WriteFile(file, []byte("priority=250,ct_state=+trk,in_port=11 actions=goto_table:46\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.MustOfctl(t, "-O", "OpenFlow15", "add-flows", "br-int", file)
	packet := func(state, mark string) string {
		return fmt.Sprintf("in_port=11,ct_state=%s,ct_mark=%s,udp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.6,nw_dst=8.8.8.8,udp_dst=53,nw_ttl=64",
			state, mark, pod2.MAC, n.GatewayMAC)
	}
	denied := `60\. ip,in_port=11, priority 200\n\s+drop`
	cases := []traceCase{
		{name: "an established Service connection policy never admitted is evaluated, and refused",
			flow: packet("est|trk", "0x10"), want: []string{denied}},
		{name: "an established Service connection policy admitted skips the rules",
			flow: packet("est|trk", "0x110"), want: []string{`46\. ct_state=-new\+est\+trk,ct_mark=0x100/0x100,ip, priority 64000\n\s+goto_table:47`, `47\. reg10=0, priority 190`}, reject: []string{"60. ip,in_port=11"}},
		{name: "an established connection that is no Service's skips the rules",
			flow: packet("est|trk", "0"), want: []string{`46\. ct_state=-new\+est\+trk,ct_mark=0/0x10,ip, priority 64000\n\s+goto_table:47`, `47\. reg10=0, priority 190`}, reject: []string{"60. ip,in_port=11"}},
		{name: "a reply skips the rules",
			flow: packet("est|rpl|trk", "0x10"), want: []string{`46\. ct_state=-new\+rpl\+trk,ip, priority 64000\n\s+goto_table:47`, `47\. reg10=0, priority 190`}, reject: []string{"60. ip,in_port=11"}},
	}
	runTraces(t, o, cases)
}

// TestServiceConnectionsAreAdmittedAtCommit: a Service connection that reaches ConntrackCommit is
// committed again in its zone with PolicyAdmittedCTMark, new or not (not yet admitted).
func TestServiceConnectionsAreAdmittedAtCommit(t *testing.T) {
	g := NewWithT(t)
	got := strs(testNode().ServiceBaseFlows())
	g.Expect(got).To(ContainElement(
		"table=105, priority=210,ct_state=-rpl+trk,ct_mark=0x10/0x110,ip actions=ct(commit,table=110,zone=65520,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63]))"))
}
