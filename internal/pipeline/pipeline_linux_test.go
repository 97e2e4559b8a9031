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

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
)

// These tests load the pipeline into a real ovs-vswitchd (userspace datapath) and walk packets
// through it with ofproto/trace: what the builders render is what OVS installs, and the paths of the
// seed design hold.

var (
	pod1   = Pod{OFPort: 10, MAC: mustMAC("02:42:0a:f4:01:05"), IP: netip.MustParseAddr("10.244.1.5")}
	pod2   = Pod{OFPort: 11, MAC: mustMAC("02:42:0a:f4:01:06"), IP: netip.MustParseAddr("10.244.1.6")}
	remote = RemoteRoute{
		CIDR: netip.MustParsePrefix("10.244.2.0/24"), Tunnel: true, NodeIP: netip.MustParseAddr("192.168.10.12"),
		VNI: 4096, DstMAC: GlobalVirtualMAC, GatewayIP: netip.MustParseAddr("10.244.2.1"), Peer: 0x2,
	}
	// remote3 is a second peer, with the node's own VNI.
	remote3 = RemoteRoute{
		CIDR: netip.MustParsePrefix("10.244.3.0/24"), Tunnel: true, NodeIP: netip.MustParseAddr("192.168.10.13"),
		VNI: 1, DstMAC: GlobalVirtualMAC, GatewayIP: netip.MustParseAddr("10.244.3.1"), Peer: 0x3,
	}
)

func loadPipeline(t *testing.T, n Node) (*ovstest.OVS, []string) {
	t.Helper()
	return loadPipelineWith(t, n, []Pod{pod1, pod2})
}

// loadPipelineWith is loadPipeline with pods (pod1 and pod2, as the test wants them) and extra flows.
func loadPipelineWith(t *testing.T, n Node, pods []Pod, extra ...openflow.Flow) (*ovstest.OVS, []string) {
	t.Helper()
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
		{"pod1", pod1.OFPort, []string{"type=internal"}},
		{"pod2", pod2.OFPort, []string{"type=internal"}},
	} {
		o.AddPort(t, "br-int", p.name, p.ofport, p.opts...)
	}
	flows := slices.Concat(n.BaseFlows(), n.RouteFlows(remote), n.RouteFlows(remote3), extra)
	for _, p := range pods {
		flows = append(flows, n.PodFlows(p)...)
	}
	var text []string
	for _, f := range flows {
		text = append(text, f.String())
	}
	file := filepath.Join(t.TempDir(), "flows")
	if err := os.WriteFile(file, []byte(strings.Join(text, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.MustOfctl(t, "-O", "OpenFlow15", "--bundle", "add-flows", "br-int", file)
	slices.Sort(text)
	return o, text
}

func TestPipelineInstallsAsRendered(t *testing.T) {
	g := NewWithT(t)
	o, want := loadPipeline(t, testNode())
	got, err := o.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want), "ovs-ofctl dump-flows must print exactly what the builders render")
}

func TestPipelinePaths(t *testing.T) {
	n := testNode()
	o, _ := loadPipeline(t, n)
	gw := n.GatewayMAC.String()
	cases := []traceCase{
		{
			name:   "Pod to external is SNATed to the node IP and leaves on the gateway",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=8.8.8.8,nw_ttl=64", pod1.MAC, gw),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{`nat\(src=192\.168\.10\.11\)`, "set_field:0x40->ct_mark", "output:2"},
		},
		{
			name:   "Pod to a Service CIDR keeps its address",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.96.0.10,nw_ttl=64", pod1.MAC, gw),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{"-> output port is 2"},
			reject: []string{"nat(src="},
		},
		{
			name:   "Pod to local Pod is switched to its port",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.1.6,nw_ttl=64", pod1.MAC, pod2.MAC),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{"-> output port is 11"},
			reject: []string{"nat(src="},
		},
		{
			name:   "Pod to remote Pod is tunnelled to the remote node with the VNI",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.2.7,nw_ttl=64", pod1.MAC, gw),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{"set_field:192.168.10.12->tun_dst", "set_field:0x1000->tun_id", "-> output port is 1"},
			reject: []string{"nat(src="},
		},
		{
			name: "A Pod spoofing another address is dropped",
			flow: fmt.Sprintf("in_port=10,ip,dl_src=%s,dl_dst=%s,nw_src=10.244.1.99,nw_dst=8.8.8.8,nw_ttl=64", pod1.MAC, gw),
			want: []string{"Datapath actions: drop"},
		},
		{
			name:   "Tunnelled traffic to a local Pod gets the Pod's MAC",
			flow:   fmt.Sprintf("in_port=1,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.2.7,nw_dst=10.244.1.5,nw_ttl=64,tun_id=4096,tun_src=192.168.10.12,tun_dst=192.168.10.11", gw, GlobalVirtualMAC),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{fmt.Sprintf("set_field:%s->eth_dst", pod1.MAC), "-> output port is 10", `Datapath actions: .*ttl=63`},
		},
		{
			name:   "Tunnelled traffic to the node's VTEP MAC is delivered on the fast path, routed once (TTL 63)",
			flow:   fmt.Sprintf("in_port=1,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.2.7,nw_dst=10.244.1.5,nw_ttl=64,tun_id=4096,tun_src=192.168.10.12,tun_dst=192.168.10.11", gw, n.VTEPMAC),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{fmt.Sprintf("set_field:%s->eth_dst", pod1.MAC), "-> output port is 10", `Datapath actions: .*ttl=63`},
		},
		{
			name:   "Tunnelled traffic to the gateway address is for the host and keeps its TTL",
			flow:   fmt.Sprintf("in_port=1,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.2.7,nw_dst=10.244.1.1,nw_ttl=64,tun_id=4096,tun_src=192.168.10.12,tun_dst=192.168.10.11", gw, n.VTEPMAC),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{"-> output port is 2"},
			reject: []string{"dec_ttl", "ttl=63"},
		},
		{
			name: "Host traffic to the outside leaves on the uplink untouched",
			flow: "in_port=LOCAL,ip,nw_src=192.168.10.11,nw_dst=8.8.8.8,nw_ttl=64",
			want: []string{"output:3"},
		},
		{
			name:   "Host traffic from the uplink that is no reply to a Pod goes to the host",
			flow:   "in_port=3,tcp,nw_src=8.8.8.8,nw_dst=192.168.10.11,nw_ttl=64",
			ctNext: []string{"trk,new"},
			want:   []string{`31. ip,reg0=0x3/0xffff, priority 190\n\s+LOCAL\n`},
		},
		{
			name:   "A SNATed connection's reply from the uplink is un-NATed towards its Pod",
			flow:   "in_port=3,udp,nw_src=8.8.8.8,nw_dst=192.168.10.11,nw_ttl=64",
			ctNext: []string{"trk,est"},
			want:   []string{`ct\(table=31,zone=65520,nat\)`},
		},
		{
			name:   "GRE from the uplink goes to the host without conntrack",
			flow:   "in_port=3,ip,nw_proto=47,nw_src=192.168.10.254,nw_dst=192.168.10.11,nw_ttl=64",
			want:   []string{`0. in_port=3, priority 190\n\s+LOCAL\n`},
			reject: []string{"ct("},
		},
		{
			name:   "An ICMP fragmentation-needed for the node goes to the host without conntrack",
			flow:   "in_port=3,icmp,nw_src=192.168.10.254,nw_dst=192.168.10.11,nw_ttl=64,icmp_type=3,icmp_code=4",
			want:   []string{`0. icmp,in_port=3,nw_dst=192.168.10.11,icmp_type=3, priority 210\n\s+LOCAL\n`},
			reject: []string{"ct("},
		},
		{
			name:   "An ICMP time-exceeded for the node goes to the host without conntrack",
			flow:   "in_port=3,icmp,nw_src=192.168.10.254,nw_dst=192.168.10.11,nw_ttl=64,icmp_type=11,icmp_code=0",
			want:   []string{`priority 210\n\s+LOCAL\n`},
			reject: []string{"ct("},
		},
		{
			name:   "An ICMP echo to the node still goes through conntrack",
			flow:   "in_port=3,icmp,nw_src=192.168.10.254,nw_dst=192.168.10.11,nw_ttl=64,icmp_type=8,icmp_code=0",
			ctNext: []string{"trk,new"},
			want:   []string{`ct\(table=31,zone=65520,nat\)`, `31. ip,reg0=0x3/0xffff, priority 190\n\s+LOCAL\n`},
		},
		{
			name:   "SCTP from a Pod is dropped before conntrack, as Windows would drop it in ct()",
			flow:   fmt.Sprintf("in_port=10,sctp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.244.1.6,nw_ttl=64", pod1.MAC, pod2.MAC),
			want:   []string{"Datapath actions: drop"},
			reject: []string{"ct("},
		},
		{
			name: "The host's ARP for a remote gateway is answered with the global virtual MAC",
			flow: fmt.Sprintf("in_port=2,arp,dl_src=%s,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_spa=10.244.1.1,arp_tpa=10.244.2.1,arp_sha=%s", gw, gw),
			want: []string{"set_field:aa:bb:cc:dd:ee:ff->arp_sha", "set_field:10.244.2.1->arp_spa", "IN_PORT"},
		},
		{
			name:   "A Pod's UDP to a peer's tunnel port is dropped (it would leave SNATed to the node IP, as the node's tunnel)",
			flow:   fmt.Sprintf("in_port=10,udp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=192.168.10.12,udp_src=40000,udp_dst=4789,nw_ttl=64", pod1.MAC, gw),
			want:   []string{`10\. udp,reg0=0x2/0xffff,nw_dst=192\.168\.10\.12,tp_dst=4789, priority 210\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"nat(src="},
		},
		{
			name: "A Pod's ARP with its own MAC and IP passes the spoof guard",
			flow: fmt.Sprintf("in_port=10,arp,dl_src=%s,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=2,arp_spa=10.244.1.5,arp_tpa=10.244.1.5,arp_sha=%s", pod1.MAC, pod1.MAC),
			want: []string{"goto_table:20", "NORMAL"},
		},
		{
			name:   "A Pod announcing its own IP with another Pod's MAC (arp_sha) is dropped",
			flow:   fmt.Sprintf("in_port=10,arp,dl_src=%s,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=2,arp_spa=10.244.1.5,arp_tpa=10.244.1.5,arp_sha=%s", pod1.MAC, pod2.MAC),
			want:   []string{`10\. priority 0\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"NORMAL", "goto_table:20"},
		},
	}
	runTraces(t, o, cases)
}

// tunnelled is a TCP packet from the tunnel to pod1 with the tunnel source, VNI and inner source given.
func tunnelled(n Node, tunSrc string, vni int, innerSrc string) string {
	return fmt.Sprintf("in_port=1,tcp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=10.244.1.5,nw_ttl=64,tun_id=%d,tun_src=%s,tun_dst=192.168.10.11",
		n.GatewayMAC, GlobalVirtualMAC, innerSrc, vni, tunSrc)
}

// TestTunnelAdmissionPaths traces tunnelled packets: only a peer's tunnel endpoint, with its VNI and
// an inner source it owns, reaches a Pod; every other packet ends in the drop flow of its reason.
func TestTunnelAdmissionPaths(t *testing.T) {
	n := testNode()
	o, _ := loadPipeline(t, n)
	delivered := []string{"-> output port is 10", `Datapath actions: .*ttl=63`}
	cases := []traceCase{
		{
			name: "A peer's Pod from the peer's address with its VNI is admitted",
			flow: tunnelled(n, "192.168.10.13", 1, "10.244.3.9"), ctNext: []string{"trk,new", "trk,new"},
			want: append([]string{`1\. ip,tun_id=0x1,tun_src=192\.168\.10\.13,nw_src=10\.244\.3\.0/24, priority 200`}, delivered...),
		},
		{
			name: "The peer's host (inner source its node IP) is admitted",
			flow: tunnelled(n, "192.168.10.12", 4096, "192.168.10.12"), ctNext: []string{"trk,new", "trk,new"},
			want: delivered,
		},
		{
			name:   "A host that is no peer, with inner source a peer's Pod, is dropped and its address learned for the peer",
			flow:   tunnelled(n, "192.168.10.254", 1, "10.244.3.9"),
			want:   []string{`1\. ip,nw_src=10\.244\.3\.0/24, priority 180\n\s+learn\(table=3,hard_timeout=60,priority=200,delete_learned,cookie=0xa0000000003,NXM_NX_TUN_IPV4_SRC\[\]\)`, "Datapath actions: drop"},
			reject: []string{"output port", "goto_table:2\n"},
		},
		{
			name:   "A host that is no peer, with an inner source no peer owns, is dropped",
			flow:   tunnelled(n, "192.168.10.254", 1, "172.16.0.9"),
			want:   []string{`1\. priority 0\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"output port"},
		},
		{
			name:   "A peer sending another peer's Pod address is dropped",
			flow:   tunnelled(n, "192.168.10.12", 4096, "10.244.3.9"),
			want:   []string{`1\. tun_id=0x1000,tun_src=192\.168\.10\.12, priority 195\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"output port", "learn("},
		},
		{
			name:   "A peer sending this node's gateway address is dropped",
			flow:   tunnelled(n, "192.168.10.12", 4096, "10.244.1.1"),
			want:   []string{`priority 195\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"output port"},
		},
		{
			name:   "A peer with another VNI than its own is dropped",
			flow:   tunnelled(n, "192.168.10.12", 1, "10.244.2.7"),
			want:   []string{`1\. tun_src=192\.168\.10\.12, priority 190\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"output port"},
		},
	}
	runTraces(t, o, cases)
}

// TestTunnelAdmissionOff traces the packets admission drops through a node with admission off: they
// reach the Pod.
func TestTunnelAdmissionOff(t *testing.T) {
	n := testNode()
	n.AdmitAnyTunnelSource = true
	o, _ := loadPipeline(t, n)
	runTraces(t, o, []traceCase{
		{
			name: "A host that is no peer reaches the Pod",
			flow: tunnelled(n, "192.168.10.254", 7, "172.16.0.9"), ctNext: []string{"trk,new", "trk,new"},
			want: []string{`1\. ip, priority 220\n\s+goto_table:2`, "-> output port is 10"},
		},
	})
}

// traceCase is a packet traced through the installed pipeline with ofproto/trace.
type traceCase struct {
	name string
	flow string
	// ctNext is the conntrack state each ct() recirculation sees.
	ctNext []string
	// want are regular expressions (most are plain text) the trace must match.
	want []string
	// reject are texts the trace must not contain.
	reject []string
}

// runTraces traces every case through the bridge br-int of o, one subtest each.
func runTraces(t *testing.T, o *ovstest.OVS, cases []traceCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			args := []string{"ofproto/trace", "br-int", tc.flow}
			for _, s := range tc.ctNext {
				args = append(args, "--ct-next", s)
			}
			out, err := o.Appctl(args...)
			g.Expect(err).NotTo(HaveOccurred(), out)
			for _, w := range tc.want {
				g.Expect(out).To(MatchRegexp(w), "trace:\n%s", out)
			}
			for _, r := range tc.reject {
				g.Expect(out).NotTo(ContainSubstring(r), "trace:\n%s", out)
			}
		})
	}
}
