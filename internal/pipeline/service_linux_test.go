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

// loadServices adds the Services' base flows and one TCP Service port (endpoint pod2 on this node
// for the cluster group, a remote endpoint for the external one) to a loaded pipeline: groups
// first, as the agent does.
func loadServices(t *testing.T, o *ovstest.OVS, n Node) (groups, flows []string) {
	t.Helper()
	write := func(name string, lines []string) string {
		file := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	sp := testServicePort(n, openflow.ProtoTCP)
	cluster, external := sp, sp
	cluster.NodePort = 0
	cluster.Endpoints = []Endpoint{{Addr: netipPort(pod2.IP.String() + ":8080"), Local: true}}
	external.ClusterIP = netipAddr("")
	external.ClusterGroup, external.ExternalGroup = 3, 4
	external.Endpoints = []Endpoint{{Addr: netipPort("10.244.2.7:8080")}}
	// Session affinity ClientIP, an external IP and a load balancer IP with a source range, on
	// another port.
	affinity := testServicePort(n, openflow.ProtoUDP)
	affinity.ClusterIP, affinity.NodePort = netipAddr("10.96.0.11"), 0
	affinity.ClusterGroup, affinity.ExternalGroup = 5, 6
	affinity.AffinityTimeout = 10
	affinity.ExternalIPs = []netip.Addr{netipAddr("192.168.10.100")}
	affinity.LoadBalancerIPs = []netip.Addr{netipAddr("192.168.10.200")}
	affinity.SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24")}
	gs1, fs1 := n.ServiceFlows(cluster)
	gs2, fs2 := n.ServiceFlows(external)
	gs3, fs3 := n.ServiceFlows(affinity)
	// A port without endpoints, refused by the agent.
	none := testServicePort(n, openflow.ProtoTCP)
	none.ClusterIP, none.NodePort, none.ClusterGroup, none.Endpoints = netipAddr("10.96.0.12"), 0, 7, nil
	gs4, fs4 := n.ServiceFlows(none)
	// A UDP port in a conntrack zone of its own.
	zoned := testServicePort(n, openflow.ProtoUDP)
	zoned.ClusterIP, zoned.NodePort, zoned.ClusterGroup, zoned.UDPZone = netipAddr("10.96.0.13"), 0, 8, ServiceUDPZoneFirst
	gs5, fs5 := n.ServiceFlows(zoned)
	groups = groupStrs(slices.Concat(gs1, gs2, gs3, gs4, gs5))
	flows = strs(slices.Concat(n.ServiceBaseFlows(), fs1, fs2, fs3, fs4, fs5, n.HairpinFlows(pod2.IP)))
	o.MustOfctl(t, "-O", "OpenFlow15", "--bundle", "add-groups", "br-int", write("groups", groups))
	o.MustOfctl(t, "-O", "OpenFlow15", "--bundle", "add-flows", "br-int", write("flows", flows))
	return groups, flows
}

func TestServicesInstallAsRendered(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	o, base := loadPipeline(t, n)
	groups, flows := loadServices(t, o, n)
	got, err := o.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	want := slices.Concat(base, flows)
	slices.Sort(want)
	g.Expect(got).To(Equal(want), "ovs-ofctl dump-flows must print exactly what the builders render")
	gotGroups, err := o.DumpGroups("br-int")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gotGroups).To(ConsistOf(groups))
}

// TestServicePaths walks the Service paths with ofproto/trace up to the group (ofproto/trace does
// not follow the select group's dp_hash recirculation; the buckets are what
// TestServicesInstallAsRendered and the integration tests' real packets check), and neither sets
// ct_mark: the paths of established connections are the integration tests' too.
func TestServicePaths(t *testing.T) {
	n := testNode()
	o, _ := loadPipeline(t, n)
	loadServices(t, o, n)
	gw := n.GatewayMAC.String()
	cases := []traceCase{
		{
			name:   "A Pod's new connection to the ClusterIP is DNATed to the endpoint in zone 65520 and gets the virtual MAC",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=10.96.0.10,tp_dst=80,nw_ttl=64", pod1.MAC, gw),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{`40\. ct_state=\+new\+trk,tcp,nw_dst=10\.96\.0\.10,tp_dst=80, priority 200\n\s+group:1`},
		},
		{
			name:   "The gateway (the host) reaches the ClusterIP",
			flow:   fmt.Sprintf("in_port=2,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.1,nw_dst=10.96.0.10,tp_dst=80,nw_ttl=64", gw, GlobalVirtualMAC),
			ctNext: []string{"trk,new", "trk,new"},
			want:   []string{`group:1`},
		},
		{
			name:   "A new NodePort connection from the uplink goes to the external group",
			flow:   "in_port=3,tcp,dl_src=02:00:00:00:00:99,dl_dst=02:00:00:00:00:11,nw_src=192.168.10.99,nw_dst=192.168.10.11,tp_dst=30080,nw_ttl=64",
			ctNext: []string{"trk,new", "trk,new", "trk,new"},
			want:   []string{"goto_table:40", `priority 210\n\s+group:4`},
			reject: []string{"LOCAL"},
		},
		{
			name:   "Other new connections from the uplink still go to the host",
			flow:   "in_port=3,tcp,nw_src=192.168.10.99,nw_dst=192.168.10.11,tp_dst=22,nw_ttl=64",
			ctNext: []string{"trk,new"},
			want:   []string{`31. ip,reg0=0x3/0xffff, priority 190\n\s+LOCAL\n`},
		},
		{
			name:   "A Pod's new connection to the NodePort goes to the cluster group",
			flow:   fmt.Sprintf("in_port=10,tcp,dl_src=%s,dl_dst=%s,nw_src=10.244.1.5,nw_dst=192.168.10.11,tp_dst=30080,nw_ttl=64", pod1.MAC, gw),
			ctNext: []string{"trk,new"},
			want:   []string{`priority 200\n\s+group:3`},
		},
		{
			name:   "A reply to the Service SNAT address is un-SNATed in zone 65521 before zone 65520",
			flow:   "in_port=1,tcp,nw_src=10.244.2.7,nw_dst=10.244.1.1,tp_src=8080,nw_ttl=64,tun_id=4096,tun_src=192.168.10.12,tun_dst=192.168.10.11",
			ctNext: []string{"trk,est,rpl", "trk,est,rpl"},
			want:   []string{`ct\(table=30,zone=65521,nat\)`, `ct\(table=31,zone=65520,nat\)`},
		},
	}
	runTraces(t, o, cases)
}
