package pipeline

import (
	"fmt"
	"net/netip"
	"testing"
)

// egressIP is the egress IP of the traces' Egress.
var egressIP = netip.MustParseAddr("192.168.10.200")

// TestEgressRelayPaths traces a node whose selected Pod (pod1) has its Egress on the peer remote
// (192.168.10.12, VNI 4096): its new connections to outside the cluster go through the tunnel to
// the holder, the cluster's destinations and unselected Pods do not, and from the tunnel only the
// holder's replies of relayed connections reach the Pod. (ofproto/trace takes ct_mark from the
// flow: a reply's "ct_mark=0x800" is the mark conntrack would give it.)
func TestEgressRelayPaths(t *testing.T) {
	n := testNode()
	o, _ := loadPipelineWith(t, n, []Pod{pod1, pod2}, n.EgressFlows(nil, []EgressRelay{{Holder: remote, Pods: []netip.Addr{pod1.IP}}})...)
	gw := n.GatewayMAC.String()
	fromPod := func(p Pod, dst string) string {
		return fmt.Sprintf("in_port=%d,tcp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64", p.OFPort, p.MAC, gw, p.IP, dst)
	}
	toPod := func(tunSrc string, vni int, mark string) string {
		return fmt.Sprintf("in_port=1,tcp,dl_src=%s,dl_dst=%s,nw_src=8.8.8.8,nw_dst=10.244.1.5,nw_ttl=64,tun_id=%d,tun_src=%s,tun_dst=192.168.10.11%s",
			gw, GlobalVirtualMAC, vni, tunSrc, mark)
	}
	cases := []traceCase{
		{
			name: "A selected Pod's new connection to outside goes to the holder, committed with the relay mark",
			flow: fromPod(pod1, "8.8.8.8"), ctNext: []string{"trk,new", "trk,new"},
			want:   []string{"set_field:192.168.10.12->tun_dst", "set_field:0x1000->tun_id", "set_field:0x800/0x800->ct_mark", "-> output port is 1"},
			reject: []string{"nat(src=", "output port is 2"},
		},
		{
			name: "A later packet of a relayed connection follows it",
			flow: fromPod(pod1, "8.8.8.8") + ",ct_mark=0x800", ctNext: []string{"trk,est"},
			want: []string{"set_field:192.168.10.12->tun_dst", "-> output port is 1"},
		},
		{
			name: "A reply of a connection the Pod accepted (no relay mark) never goes to the holder",
			flow: fromPod(pod1, "8.8.8.8"), ctNext: []string{"trk,est,rpl"},
			reject: []string{"tun_dst", "output port is 1"},
		},
		{
			name: "A selected Pod's connection to a Service CIDR is not relayed",
			flow: fromPod(pod1, "10.96.0.10"), ctNext: []string{"trk,new", "trk,new"},
			want:   []string{"-> output port is 2"},
			reject: []string{"tun_dst", "nat(src="},
		},
		{
			name: "An unselected Pod keeps the node's SNAT",
			flow: fromPod(pod2, "8.8.8.8"), ctNext: []string{"trk,new", "trk,new"},
			want:   []string{`nat\(src=192\.168\.10\.11\)`, "output:2"},
			reject: []string{"tun_dst"},
		},
		{
			name: "The holder's reply of a relayed connection reaches the Pod",
			flow: toPod("192.168.10.12", 4096, ",ct_mark=0x800"), ctNext: []string{"trk,est,rpl"},
			want: []string{`1\. ip,tun_id=0x1000,tun_src=192\.168\.10\.12,nw_dst=10\.244\.1\.5, priority 197`, "-> output port is 10"},
		},
		{
			name: "A forged packet from the holder (outside source, no connection) is dropped",
			flow: toPod("192.168.10.12", 4096, ""), ctNext: []string{"trk,new"},
			want:   []string{`31\. ip,reg0=0x200000/0x200000, priority 221\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"output port is 10"},
		},
		{
			name: "A reply of a connection not relayed (no mark) from the holder is dropped",
			flow: toPod("192.168.10.12", 4096, ",ct_mark=0x40"), ctNext: []string{"trk,est,rpl"},
			want:   []string{"priority 221", "Datapath actions: drop"},
			reject: []string{"output port is 10"},
		},
		{
			name: "The same from another peer is dropped at admission",
			flow: toPod("192.168.10.13", 1, ",ct_mark=0x800"), ctNext: []string{"trk,est,rpl"},
			want:   []string{`tun_src=192\.168\.10\.13, priority 195\n\s+drop`, "Datapath actions: drop"},
			reject: []string{"output port is 10"},
		},
		{
			name: "The holder's address with another VNI is dropped at admission",
			flow: toPod("192.168.10.12", 1, ",ct_mark=0x800"), ctNext: []string{"trk,est,rpl"},
			want:   []string{"Datapath actions: drop"},
			reject: []string{"output port is 10"},
		},
	}
	runTraces(t, o, cases)
}

// TestEgressHolderRemotePaths traces the holder of an Egress that selects a Pod of the peer remote:
// the Pod's relayed packets are SNATed to the egress IP and leave on the gateway, the un-SNATed
// replies from the uplink go back through the tunnel to the Pod's node, and a remote Pod's packet
// to the cluster is never SNATed. (The later packets of a relayed connection arrive with the Pod's
// source and leave ConntrackTable with the egress IP's: ofproto/trace applies no NAT, and admission
// sees the Pod's address, so that flow is pinned in TestEgressHolderRemotePodFlows and exercised by
// the e2e test TestEgressRemotePods.)
func TestEgressHolderRemotePaths(t *testing.T) {
	n := testNode()
	held := Egress{ID: 1, IP: egressIP, RemotePods: []RemotePod{{IP: netip.MustParseAddr("10.244.2.7"), Node: remote}}}
	o, _ := loadPipelineWith(t, n, []Pod{pod1, pod2}, n.EgressFlows([]Egress{held}, nil)...)
	relayed := func(dst string) string {
		return fmt.Sprintf("in_port=1,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.2.7,nw_dst=%s,nw_ttl=64,tun_id=4096,tun_src=192.168.10.12,tun_dst=192.168.10.11",
			n.VTEPMAC, GlobalVirtualMAC, dst)
	}
	cases := []traceCase{
		{
			name: "A remote selected Pod's relayed packet is SNATed to the egress IP and leaves on the gateway",
			flow: relayed("8.8.8.8"), ctNext: []string{"trk,new", "trk,new"},
			want:   []string{`nat\(src=192\.168\.10\.200\)`, "output:2"},
			reject: []string{"nat(src=192.168.10.11)"},
		},
		{
			name: "A remote Pod's packet to the cluster is not SNATed",
			flow: relayed("10.96.0.10"), ctNext: []string{"trk,new", "trk,new"},
			reject: []string{"nat(src="},
		},
		{
			name: "The un-SNATed reply from the uplink goes back through the tunnel to the Pod's node",
			flow: fmt.Sprintf("in_port=3,tcp,nw_src=8.8.8.8,nw_dst=10.244.2.7,nw_ttl=64,ct_mark=0x40"), ctNext: []string{"trk,est,rpl"},
			want: []string{`70\. .*nw_dst=10\.244\.2\.7, priority 210`, "set_field:192.168.10.12->tun_dst", "set_field:0x1000->tun_id", "-> output port is 1"},
		},
	}
	runTraces(t, o, cases)
}
