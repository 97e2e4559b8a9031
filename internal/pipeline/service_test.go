package pipeline

import (
	"net/netip"
	"slices"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

func testServicePort(n Node, proto uint8) ServicePort {
	return ServicePort{
		ClusterIP: netip.MustParseAddr("10.96.0.10"), Protocol: proto, Port: 80, NodePort: 30080,
		NodeIPs: []netip.Addr{n.NodeIP}, ClusterGroup: 1, ExternalGroup: 2,
		Endpoints: []Endpoint{
			{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), Local: true},
			{Addr: netip.MustParseAddrPort("10.244.2.7:8080")},
		},
	}
}

func strs(flows []openflow.Flow) []string {
	out := make([]string, 0, len(flows))
	for _, f := range flows {
		out = append(out, f.String())
	}
	return out
}

func groupStrs(groups []openflow.Group) []string {
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		out = append(out, g.String())
	}
	return out
}

// TestServiceFlows pins the flows and groups of one Service port: ClusterIP and NodePort flows per
// protocol, the cluster group DNATing in zone 65520 with ct_mark 0x10, and the external group that
// also keeps the client's MACs in ct_label and SNATs (reg0[18], ct_mark 0x20) for remote endpoints.
func TestServiceFlows(t *testing.T) {
	n := testNode()
	cases := []struct {
		name       string
		port       ServicePort
		wantFlows  []string
		wantGroups []string
	}{
		{
			name: "TCP ClusterIP and NodePort, a local and a remote endpoint",
			port: testServicePort(n, openflow.ProtoTCP),
			wantFlows: []string{
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:1",
				"table=31, priority=200,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30080 actions=goto_table:40",
				"table=40, priority=210,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30080 actions=group:2",
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=192.168.10.11,tp_dst=30080 actions=group:1",
			},
			wantGroups: []string{
				"group_id=1,type=select," +
					"bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x10/0x10->ct_mark))," +
					"bucket=bucket_id:1,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0x10/0x10->ct_mark))",
				"group_id=2,type=select," +
					"bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x90/0x90->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))," +
					"bucket=bucket_id:1,weight:100,actions=set_field:0x40000/0x40000->reg0,ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0xb0/0xb0->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))",
			},
		},
		{
			name: "UDP ClusterIP only, no endpoints: new connections go to the agent, which refuses them",
			port: ServicePort{ClusterIP: netip.MustParseAddr("10.96.0.10"), Protocol: openflow.ProtoUDP, Port: 53, ClusterGroup: 3, AffinityTimeout: 10},
			wantFlows: []string{
				"table=40, priority=200,ct_state=+new+trk,udp,nw_dst=10.96.0.10,tp_dst=53 actions=CONTROLLER:65535",
			},
			wantGroups: []string{"group_id=3,type=select"},
		},
		{
			name: "NodePort on every node IP",
			port: ServicePort{Protocol: openflow.ProtoUDP, Port: 53, NodePort: 30053, ClusterGroup: 4, ExternalGroup: 5,
				NodeIPs:   []netip.Addr{netip.MustParseAddr("192.168.10.11"), netip.MustParseAddr("172.16.0.11"), netip.MustParseAddr("fd00::11")},
				Endpoints: []Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:53"), Local: true}}},
			wantFlows: []string{
				"table=31, priority=200,ct_state=+new+trk,udp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30053 actions=goto_table:40",
				"table=40, priority=210,ct_state=+new+trk,udp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30053 actions=group:5",
				"table=40, priority=200,ct_state=+new+trk,udp,nw_dst=192.168.10.11,tp_dst=30053 actions=group:4",
				"table=31, priority=200,ct_state=+new+trk,udp,reg0=0x3/0xffff,nw_dst=172.16.0.11,tp_dst=30053 actions=goto_table:40",
				"table=40, priority=210,ct_state=+new+trk,udp,reg0=0x3/0xffff,nw_dst=172.16.0.11,tp_dst=30053 actions=group:5",
				"table=40, priority=200,ct_state=+new+trk,udp,nw_dst=172.16.0.11,tp_dst=30053 actions=group:4",
			},
			wantGroups: []string{
				"group_id=4,type=select,bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:53),exec(set_field:0x10/0x10->ct_mark))",
				"group_id=5,type=select,bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:53),exec(set_field:0x90/0x90->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))",
			},
		},
		{
			name: "session affinity, an external IP, a load balancer IP admitting one source range, externalTrafficPolicy Local",
			port: func() ServicePort {
				sp := testServicePort(n, openflow.ProtoTCP)
				sp.NodePort = 0
				sp.AffinityTimeout = 5
				sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("192.168.10.100")}
				sp.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("192.168.10.200")}
				sp.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.168.10.254/32")}
				sp.ExternalLocal = true
				return sp
			}(),
			wantFlows: []string{
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=resubmit(,42),goto_table:43",
				"table=43, priority=200,ct_state=+new+trk,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:1",
				"table=31, priority=200,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.100,tp_dst=80 actions=goto_table:40",
				"table=40, priority=210,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.100,tp_dst=80 actions=resubmit(,42),goto_table:43",
				"table=43, priority=210,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.100,tp_dst=80 actions=group:2",
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=192.168.10.100,tp_dst=80 actions=resubmit(,42),goto_table:43",
				"table=43, priority=200,ct_state=+new+trk,tcp,nw_dst=192.168.10.100,tp_dst=80 actions=group:1",
				"table=31, priority=200,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.200,tp_dst=80 actions=goto_table:40",
				"table=40, priority=220,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_src=192.168.10.254,nw_dst=192.168.10.200,tp_dst=80 actions=resubmit(,42),goto_table:43",
				"table=43, priority=220,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_src=192.168.10.254,nw_dst=192.168.10.200,tp_dst=80 actions=group:2",
				"table=40, priority=210,ct_state=+new+trk,tcp,nw_src=192.168.10.254,nw_dst=192.168.10.200,tp_dst=80 actions=resubmit(,42),goto_table:43",
				"table=43, priority=210,ct_state=+new+trk,tcp,nw_src=192.168.10.254,nw_dst=192.168.10.200,tp_dst=80 actions=group:1",
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=192.168.10.200,tp_dst=80 actions=drop",
				"table=43, priority=230,tcp,reg3=0xaf40105,reg4=0x11f90,reg5=0x5 actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x10/0x10->ct_mark))",
				"table=43, priority=230,tcp,reg3=0xaf40207,reg4=0x11f90,reg5=0x5 actions=ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0x10/0x10->ct_mark))",
				"table=43, priority=231,tcp,reg0=0x3/0xffff,reg3=0xaf40105,reg4=0x11f90,reg5=0x5 actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x90/0x90->ct_mark,move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))",
				"table=44, priority=200,tcp,reg4=0x10000/0xffff0000 actions=learn(table=42,hard_timeout=5,priority=200,delete_learned,cookie=0x90000010005,eth_type=0x800,nw_proto=6,NXM_OF_IP_SRC[],NXM_OF_IP_DST[],NXM_OF_TCP_DST[],load:NXM_NX_REG3[]->NXM_NX_REG3[],load:NXM_NX_REG4[]->NXM_NX_REG4[],load:NXM_NX_REG5[]->NXM_NX_REG5[])",
			},
			wantGroups: []string{
				"group_id=1,type=select,bucket=bucket_id:0,weight:100,actions=set_field:0xaf40105->reg3,set_field:0x11f90->reg4,set_field:0x5->reg5,resubmit(,44),ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x10/0x10->ct_mark)),bucket=bucket_id:1,weight:100,actions=set_field:0xaf40207->reg3,set_field:0x11f90->reg4,set_field:0x5->reg5,resubmit(,44),ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0x10/0x10->ct_mark))",
				"group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=set_field:0xaf40105->reg3,set_field:0x11f90->reg4,set_field:0x5->reg5,resubmit(,44),ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x90/0x90->ct_mark,move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))",
			},
		},
		{
			name: "internalTrafficPolicy Local: the cluster group holds the local endpoint only",
			port: ServicePort{ClusterIP: netip.MustParseAddr("10.96.0.10"), Protocol: openflow.ProtoUDP, Port: 53, ClusterGroup: 7, InternalLocal: true,
				Endpoints: []Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:53"), Local: true}, {Addr: netip.MustParseAddrPort("10.244.2.7:53")}}},
			wantFlows: []string{
				"table=40, priority=200,ct_state=+new+trk,udp,nw_dst=10.96.0.10,tp_dst=53 actions=group:7",
			},
			wantGroups: []string{
				"group_id=7,type=select,bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:53),exec(set_field:0x10/0x10->ct_mark))",
			},
		},
		{
			name: "UDP ClusterIP and NodePort in a zone of its own: tracked and DNATed there, recorded in 65520 for the replies before the final commit",
			port: func() ServicePort {
				sp := testServicePort(n, openflow.ProtoUDP)
				sp.UDPZone = 0xf001
				return sp
			}(),
			wantFlows: []string{
				"table=40, priority=200,ct_state=+new+trk,udp,nw_dst=10.96.0.10,tp_dst=80 actions=group:1",
				"table=31, priority=200,ct_state=+new+trk,udp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30080 actions=goto_table:40",
				"table=40, priority=210,ct_state=+new+trk,udp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30080 actions=group:2",
				"table=40, priority=200,ct_state=+new+trk,udp,nw_dst=192.168.10.11,tp_dst=30080 actions=group:1",
				"table=30, priority=215,ct_state=-trk,udp,nw_dst=10.96.0.10,tp_dst=80 actions=ct(table=31,zone=61441,nat)",
				"table=30, priority=215,ct_state=-trk,udp,nw_dst=192.168.10.11,tp_dst=30080 actions=ct(table=31,zone=61441,nat)",
				"table=31, priority=215,ct_state=+rpl+trk,ct_zone=65520,ct_mark=0xf0010000/0xffff0000,udp actions=ct(table=31,zone=61441,nat)",
				"table=105, priority=215,ct_state=+new-rpl+trk,ct_zone=61441,ct_mark=0x10/0x110,udp actions=ct(commit,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63])),ct(commit,table=110,zone=65520,exec(set_field:0xf0010000/0xffff0000->ct_mark))",
				"table=105, priority=215,ct_state=-new-rpl+trk,ct_zone=61441,ct_mark=0x10/0x110,udp actions=ct(commit,table=110,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63]))",
				// A NodePort connection from the uplink: its ingress rule alone (MACs in ct_label[0..95]).
				"table=105, priority=216,ct_state=+new-rpl+trk,ct_zone=61441,ct_mark=0x90/0x190,udp actions=ct(commit,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG11[0..15]->NXM_NX_CT_MARK[16..31])),ct(commit,table=110,zone=65520,exec(set_field:0xf0010000/0xffff0000->ct_mark))",
				"table=105, priority=216,ct_state=-new-rpl+trk,ct_zone=61441,ct_mark=0x90/0x190,udp actions=ct(commit,table=110,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG11[0..15]->NXM_NX_CT_MARK[16..31]))",
				"table=105, priority=221,ct_state=+new+trk,ct_zone=61441,ct_mark=0/0x80,udp,reg0=0x40000/0x40000 actions=ct(commit,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63])),ct(commit,zone=65520,exec(set_field:0xf0010000/0xffff0000->ct_mark)),ct(commit,table=110,zone=65521,nat(src=10.244.1.1))",
				"table=105, priority=221,ct_state=+new+trk,ct_zone=61441,ct_mark=0x80/0x80,udp,reg0=0x40000/0x40000 actions=ct(commit,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG11[0..15]->NXM_NX_CT_MARK[16..31])),ct(commit,zone=65520,exec(set_field:0xf0010000/0xffff0000->ct_mark)),ct(commit,table=110,zone=65521,nat(src=10.244.1.1))",
				"table=105, priority=231,ct_state=+new+trk,ct_zone=61441,ct_mark=0x10/0x10,udp,nw_src=10.244.1.5,nw_dst=10.244.1.5 actions=set_field:0x80000/0x80000->reg0,ct(commit,zone=61441,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63])),ct(commit,zone=65520,exec(set_field:0xf0010000/0xffff0000->ct_mark)),ct(commit,table=110,zone=65521,nat(src=10.244.1.1),exec(set_field:0x200/0x200->ct_mark))",
			},
			wantGroups: []string{
				"group_id=1,type=select," +
					"bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=61441,nat(dst=10.244.1.5:8080),exec(set_field:0x10/0x10->ct_mark))," +
					"bucket=bucket_id:1,weight:100,actions=ct(commit,table=45,zone=61441,nat(dst=10.244.2.7:8080),exec(set_field:0x10/0x10->ct_mark))",
				"group_id=2,type=select," +
					"bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=61441,nat(dst=10.244.1.5:8080),exec(set_field:0x90/0x90->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))," +
					"bucket=bucket_id:1,weight:100,actions=set_field:0x40000/0x40000->reg0,ct(commit,table=45,zone=61441,nat(dst=10.244.2.7:8080),exec(set_field:0xb0/0xb0->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))",
			},
		},
		{
			name: "the host's own connections to the NodePort, NATed by the host to 169.254.0.252: from the gateway, to a group that SNATs to the gateway IP for every endpoint and marks 0x400",
			port: func() ServicePort {
				sp := testServicePort(n, openflow.ProtoTCP)
				sp.HostGroup = 3
				sp.AffinityTimeout = 0
				return sp
			}(),
			wantFlows: []string{
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:1",
				"table=31, priority=200,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30080 actions=goto_table:40",
				"table=40, priority=210,ct_state=+new+trk,tcp,reg0=0x3/0xffff,nw_dst=192.168.10.11,tp_dst=30080 actions=group:2",
				"table=40, priority=200,ct_state=+new+trk,tcp,nw_dst=192.168.10.11,tp_dst=30080 actions=group:1",
				"table=40, priority=200,ct_state=+new+trk,tcp,reg0=0x1/0xffff,nw_dst=169.254.0.252,tp_dst=30080 actions=group:3",
			},
			wantGroups: []string{
				"group_id=1,type=select," +
					"bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x10/0x10->ct_mark))," +
					"bucket=bucket_id:1,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0x10/0x10->ct_mark))",
				"group_id=2,type=select," +
					"bucket=bucket_id:0,weight:100,actions=ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x90/0x90->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))," +
					"bucket=bucket_id:1,weight:100,actions=set_field:0x40000/0x40000->reg0,ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0xb0/0xb0->ct_mark," +
					"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47],move:NXM_OF_ETH_DST[]->NXM_NX_CT_LABEL[48..95]))",
				"group_id=3,type=select," +
					"bucket=bucket_id:0,weight:100,actions=set_field:0x40000/0x40000->reg0,ct(commit,table=45,zone=65520,nat(dst=10.244.1.5:8080),exec(set_field:0x430/0x430->ct_mark))," +
					"bucket=bucket_id:1,weight:100,actions=set_field:0x40000/0x40000->reg0,ct(commit,table=45,zone=65520,nat(dst=10.244.2.7:8080),exec(set_field:0x430/0x430->ct_mark))",
			},
		},
		{
			name: "SCTP has no flows: Windows conntrack drops it",
			port: ServicePort{ClusterIP: netip.MustParseAddr("10.96.0.10"), Protocol: 132, Port: 80, ClusterGroup: 6},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			groups, flows := n.ServiceFlows(tc.port)
			g.Expect(strs(flows)).To(ConsistOf(tc.wantFlows))
			g.Expect(groupStrs(groups)).To(ConsistOf(tc.wantGroups))
		})
	}
}

// TestServiceBaseFlows pins the flows every Service relies on: UnSNAT in zone 65521 before zone
// 65520, the virtual MAC for DNATed and established Service connections, replies of NodePort
// connections from the uplink sent back out of it with the MACs kept in ct_label, Service SNAT to
// the gateway IP in zone 65521, and the ARP answer for the host routes' next hop.
func TestServiceBaseFlows(t *testing.T) {
	g := NewWithT(t)
	g.Expect(strs(testNode().ServiceBaseFlows())).To(ConsistOf(
		"table=30, priority=210,ct_state=-trk,tcp,nw_dst=10.244.1.1 actions=ct(table=30,zone=65521,nat)",
		"table=30, priority=210,ct_state=-trk,udp,nw_dst=10.244.1.1 actions=ct(table=30,zone=65521,nat)",
		"table=30, priority=210,ct_state=-trk,icmp,nw_dst=10.244.1.1 actions=ct(table=30,zone=65521,nat)",
		"table=31, priority=220,ct_state=-new+rpl+trk,ct_mark=0x80/0x80,ip,reg10=0 actions=move:NXM_NX_CT_LABEL[0..47]->NXM_OF_ETH_DST[],move:NXM_NX_CT_LABEL[48..95]->NXM_OF_ETH_SRC[],output:3",
		"table=31, priority=219,ct_state=-new+rpl+trk,ct_mark=0x80/0x80,ip actions=drop",
		"table=31, priority=220,ct_state=-new+rpl+trk,ct_mark=0x400/0x400,ip actions=set_field:aa:bb:cc:dd:ee:ff->eth_src,set_field:02:42:0a:f4:01:01->eth_dst,output:2",
		"table=45, priority=0 actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,goto_table:46",
		"table=31, priority=200,ct_state=-new+trk,ct_mark=0x10/0x10,ip actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,goto_table:40",
		"table=105, priority=220,ct_state=+new+trk,ct_mark=0/0x80,ip,reg0=0x40000/0x40000 actions=ct(commit,zone=65520,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63])),ct(commit,table=110,zone=65521,nat(src=10.244.1.1))",
		"table=105, priority=220,ct_state=+new+trk,ct_mark=0x80/0x80,ip,reg0=0x40000/0x40000 actions=ct(commit,zone=65520,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG11[0..15]->NXM_NX_CT_MARK[16..31])),ct(commit,table=110,zone=65521,nat(src=10.244.1.1))",
		"table=105, priority=220,ct_state=-new-rpl+trk,ct_mark=0x20/0x20,ip actions=ct(table=110,zone=65521,nat)",
		"table=105, priority=210,ct_state=-rpl+trk,ct_mark=0x10/0x110,ip actions=ct(commit,table=110,zone=65520,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63]))",
		"table=105, priority=211,ct_state=-rpl+trk,ct_mark=0x90/0x190,ip actions=ct(commit,table=110,zone=65520,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG11[0..15]->NXM_NX_CT_MARK[16..31]))",
		"table=30, priority=220,ct_state=+trk,ct_mark=0x200/0x200,ip actions=set_field:0x80000/0x80000->reg0,ct(table=31,zone=65520,nat)",
		"table=110, priority=210,reg0=0x80000/0x80000 actions=IN_PORT",
		"table=20, priority=200,arp,arp_tpa=169.254.0.253,arp_op=1 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:aa:bb:cc:dd:ee:ff->eth_src,"+
			"set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],set_field:aa:bb:cc:dd:ee:ff->arp_sha,move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:169.254.0.253->arp_spa,IN_PORT",
	))
}

// TestHairpinFlows pins a local endpoint's hairpin flows: its connections to itself through a
// Service are SNATed to the gateway IP in zone 65521, marked 0x200 there, and output on in_port.
func TestHairpinFlows(t *testing.T) {
	g := NewWithT(t)
	g.Expect(strs(testNode().HairpinFlows(netip.MustParseAddr("10.244.1.5")))).To(ConsistOf(
		"table=105, priority=230,ct_state=+new+trk,ct_mark=0x10/0x10,ip,nw_src=10.244.1.5,nw_dst=10.244.1.5 actions=set_field:0x80000/0x80000->reg0,ct(commit,zone=65520,exec(set_field:0x100/0x100->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63])),ct(commit,table=110,zone=65521,nat(src=10.244.1.1),exec(set_field:0x200/0x200->ct_mark))",
		"table=105, priority=230,ct_state=-new-rpl+trk,ct_mark=0x10/0x10,ip,nw_src=10.244.1.5,nw_dst=10.244.1.5 actions=set_field:0x80000/0x80000->reg0,ct(table=110,zone=65521,nat)",
	))
}

// TestServiceMarksDoNotCollide: the Service ct_mark bits stay clear of the node-IP SNAT mark, and
// Service SNAT has a zone of its own.
func TestServiceMarksDoNotCollide(t *testing.T) {
	g := NewWithT(t)
	marks := []uint32{ServiceCTMark, ServiceSNATCTMark, ServiceExternalCTMark, HairpinCTMark, PolicyAdmittedCTMark, HostNodePortCTMark}
	for i, m := range marks {
		g.Expect(m & SNATCTMark).To(BeZero())
		g.Expect(m & ServiceZoneCTMarkMask).To(BeZero())
		for _, o := range marks[i+1:] {
			g.Expect(m & o).To(BeZero())
		}
	}
	g.Expect(ServiceSNATZone).NotTo(Equal(ConntrackZone))
	g.Expect(ServiceSNATField.Start).NotTo(BeElementOf(SNATRequiredField.Start, OFPortFoundField.Start))
}

// TestServiceFlowsPassWindowsProfile holds every flow and group the Service builders produce, with
// the base pipeline, against the Windows datapath profile.
func TestServiceFlowsPassWindowsProfile(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	d := Datapath{Flows: append(n.BaseFlows(), n.ServiceBaseFlows()...), NATZones: n.NATZones()}
	for _, proto := range []uint8{openflow.ProtoTCP, openflow.ProtoUDP} {
		sp := testServicePort(n, proto)
		sp.ClusterGroup, sp.ExternalGroup, sp.HostGroup = uint32(proto)*10, uint32(proto)*10+1, uint32(proto)*10+4
		// A NodePort is served on every address of the node's interface, not only the node IP.
		sp.NodeIPs = append(sp.NodeIPs, netip.MustParseAddr("192.168.10.21"))
		groups, flows := n.ServiceFlows(sp)
		d.Groups = append(d.Groups, groups...)
		d.Flows = append(d.Flows, flows...)
		// Session affinity, an external IP, a load balancer IP with a source range.
		sp.ClusterGroup, sp.ExternalGroup, sp.HostGroup = uint32(proto)*10+2, uint32(proto)*10+3, uint32(proto)*10+5
		sp.AffinityTimeout = 10
		sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("192.168.10.100")}
		sp.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("192.168.10.200")}
		sp.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24")}
		groups, flows = n.ServiceFlows(sp)
		d.Groups = append(d.Groups, groups...)
		d.Flows = append(d.Flows, flows...)
	}
	d.Flows = append(d.Flows, n.HairpinFlows(netip.MustParseAddr("10.244.1.5"))...)
	// The refusals of connections to a port without endpoints, to clients on every kind of port.
	for _, port := range []uint32{n.UplinkOFPort, n.GatewayOFPort, 10, openflow.PortLocal} {
		d.PacketOuts = append(d.PacketOuts, RejectPacketOut(port))
	}
	noEndpoints := testServicePort(n, openflow.ProtoTCP)
	noEndpoints.Endpoints = nil
	_, flows := n.ServiceFlows(noEndpoints)
	d.Flows = append(d.Flows, flows...)
	// A UDP port in a zone of its own, and the flush of that zone when one of its endpoints goes.
	udp := testServicePort(n, openflow.ProtoUDP)
	udp.ClusterGroup, udp.ExternalGroup, udp.HostGroup, udp.UDPZone = 30, 31, 32, ServiceUDPZoneFirst
	groups, flows := n.ServiceFlows(udp)
	d.Groups = append(d.Groups, groups...)
	d.Flows = append(d.Flows, flows...)
	d.NATZones = mergeNATZones(d.NATZones, udp.NATZones(), testServicePort(n, openflow.ProtoTCP).NATZones())
	flush, ok := udp.ZoneFlush()
	g.Expect(ok).To(BeTrue())
	d.Flushes = append(d.Flushes, flush)
	g.Expect(d.Groups).To(HaveLen(15))
	g.Expect(CheckWindows(d)).To(BeEmpty())
}

// TestServiceZoneFlushes: a UDP port with a zone of its own flushes that zone whole, which the
// Windows profile accepts; the profile rejects a 5-tuple flush of one of its connections, a flush of
// the zone TCP Services and Pod SNAT share, and a flush of a zone two ports share. Ports without a
// zone of their own (TCP, or UDP beyond the zone budget) flush nothing.
func TestServiceZoneFlushes(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	udp := testServicePort(n, openflow.ProtoUDP)
	udp.UDPZone = ServiceUDPZoneFirst + 1
	other := udp
	other.ClusterIP = netip.MustParseAddr("10.96.0.11")
	tcp := testServicePort(n, openflow.ProtoTCP)
	tcp.UDPZone = ServiceUDPZoneFirst + 2 // ignored: TCP ports DNAT in ConntrackZone
	zones := mergeNATZones(n.NATZones(), udp.NATZones(), tcp.NATZones())

	flush, ok := udp.ZoneFlush()
	g.Expect(ok).To(BeTrue())
	g.Expect(flush.Zone).To(Equal(ServiceUDPZoneFirst + 1))
	g.Expect(flush.Tuple).To(BeNil())
	g.Expect(CheckWindows(Datapath{Flushes: []ConntrackFlush{flush}, NATZones: zones})).To(BeEmpty())
	_, ok = tcp.ZoneFlush()
	g.Expect(ok).To(BeFalse(), "a TCP port has no zone of its own")
	_, ok = ServicePort{ClusterIP: udp.ClusterIP, Protocol: openflow.ProtoUDP, Port: 53}.ZoneFlush()
	g.Expect(ok).To(BeFalse(), "a UDP port without a zone (beyond the budget) DNATs in 65520")

	fiveTuple := flush
	fiveTuple.Tuple = &ConntrackTuple{Proto: openflow.ProtoUDP, Src: netip.MustParseAddr("10.244.1.9"), Dst: udp.ClusterIP, SrcPort: 40000, DstPort: 80}
	g.Expect(rules(CheckWindows(Datapath{Flushes: []ConntrackFlush{fiveTuple}, NATZones: zones}))).To(Equal([]string{RuleFlushPartial}))

	shared := ConntrackFlush{Owner: ServicesNATOwner, Zone: ConntrackZone}
	g.Expect(rules(CheckWindows(Datapath{Flushes: []ConntrackFlush{shared}, NATZones: zones}))).To(Equal([]string{RuleFlushNATZone}),
		"65520 holds Pod SNAT and TCP Services")
	g.Expect(rules(CheckWindows(Datapath{Flushes: []ConntrackFlush{flush}, NATZones: mergeNATZones(zones, other.NATZones())}))).To(Equal([]string{RuleFlushNATZone}),
		"a zone another port DNATs in too")
}

// mergeNATZones merges NAT zone owners, each owner once per zone.
func mergeNATZones(all ...map[uint16][]string) map[uint16][]string {
	out := map[uint16][]string{}
	for _, m := range all {
		for z, owners := range m {
			for _, o := range owners {
				if !slices.Contains(out[z], o) {
					out[z] = append(out[z], o)
				}
			}
		}
	}
	return out
}

func netipPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func netipAddr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}
