package service

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/pipeline"
)

type fakeNAT struct{}

func (fakeNAT) ReconcileNodePorts(context.Context, netip.Addr, []hostnet.NodePort) error { return nil }

// TestRealiseHostPorts: the registry's mappings become NodePorts of one local endpoint in the full
// pass: served on their hostIP (every node address for 0.0.0.0), the host's NAT told of their
// ports, the endpoint's hairpin flows shared; of two mappings of one port on two hostIPs only the
// first serves the host's own connections; a Service's NodePort a hostPort holds is not served;
// every flow and group passes the Windows datapath profile. It also pins the cost per mapping.
func TestRealiseHostPorts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nodeIP, second := netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.20")
	rz := nodenetwork.Realized{Node: pipeline.Node{NodeIP: nodeIP, PodCIDR: netip.MustParsePrefix("10.244.1.0/24"),
		GatewayIP: netip.MustParseAddr("10.244.1.1"), UplinkOFPort: 1, GatewayOFPort: 2},
		BridgeAddresses: []netip.Prefix{netip.PrefixFrom(nodeIP, 24), netip.PrefixFrom(second, 24)}}
	reg := hostport.NewRegistry()
	r := &Reconciler{NodeName: "node", HostPorts: reg, NodePorts: fakeNAT{}}
	pod := "ns/web"
	g.Expect(reg.Claim(hostport.Entry{Sandbox: "a", Pod: pod, IP: netip.MustParseAddr("10.244.1.5"), Mappings: []hostport.Mapping{
		{HostIP: netip.IPv4Unspecified(), HostPort: 8080, ContainerPort: 80, Protocol: "TCP"},
	}})).To(Succeed())
	r.desired(ctx, rz, nil, nil)
	hp := r.realised[hostPortsName]
	g.Expect(hp).NotTo(BeNil())
	perTCP := len(hp.flows)
	t.Logf("a TCP hostPort on every node address (2 here): %d flows, %d groups", perTCP, len(hp.groups))
	g.Expect(hp.groups).To(HaveLen(3), "cluster, external and the host's own connections")
	g.Expect(r.nodePorts).To(HaveKey(hostnet.NodePort{Protocol: "TCP", Port: 8080}))
	g.Expect(r.hairpin).To(HaveKey(netip.MustParseAddr("10.244.1.5")))

	g.Expect(reg.Claim(hostport.Entry{Sandbox: "b", Pod: "ns/dns", IP: netip.MustParseAddr("10.244.1.6"), Mappings: []hostport.Mapping{
		{HostIP: nodeIP, HostPort: 5353, ContainerPort: 53, Protocol: "UDP"},
	}})).To(Succeed())
	g.Expect(reg.Claim(hostport.Entry{Sandbox: "c", Pod: "ns/dns2", IP: netip.MustParseAddr("10.244.1.7"), Mappings: []hostport.Mapping{
		{HostIP: second, HostPort: 5353, ContainerPort: 53, Protocol: "UDP"},
	}})).To(Succeed())
	svc := &corev1.Service{}
	svc.Namespace, svc.Name, svc.UID, svc.ResourceVersion = "ns", "np", "np-uid", "1"
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
		{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 8080}}}
	groups, flows, _ := r.desired(ctx, rz, []corev1.Service{*svc}, map[ktypes.NamespacedName][]discoveryv1.EndpointSlice{})
	hp = r.realised[hostPortsName]
	g.Expect(hp.groups).To(HaveLen(3+3+2), "one UDP mapping serves the host's connections to 5353 (the first by sandbox), the other not")
	np := r.realised[ktypes.NamespacedName{Namespace: "ns", Name: "np"}]
	g.Expect(np.blocked).To(HaveKeyWithValue(hostnet.NodePort{Protocol: "TCP", Port: 8080}, ContainSubstring("Pod ns/web")))
	for _, f := range np.flows {
		g.Expect(f.String()).NotTo(ContainSubstring("tp_dst=8080"), "the NodePort the hostPort holds is not served")
	}
	t.Logf("2 UDP hostPorts on one hostIP each, in zones of their own, one serving the host: %d flows", len(hp.flows)-perTCP)

	d := pipeline.Datapath{Flows: append(rz.Node.BaseFlows(), flows...), Groups: groups, NATZones: rz.Node.NATZones()}
	for _, p := range hp.d.ports {
		sp := pipeline.ServicePort{Protocol: p.protocol, UDPZone: r.udp.zone(p.key)}
		d.NATZones = mergeZones(d.NATZones, sp.NATZones())
	}
	g.Expect(pipeline.CheckWindows(d)).To(BeEmpty())

	reg.Release("a")
	_, _, _ = r.desired(ctx, rz, []corev1.Service{*svc}, map[ktypes.NamespacedName][]discoveryv1.EndpointSlice{})
	np = r.realised[ktypes.NamespacedName{Namespace: "ns", Name: "np"}]
	g.Expect(np.blocked).To(BeEmpty(), "the NodePort is served again once the hostPort goes")
	g.Expect(np.nodePorts).To(ContainElement(hostnet.NodePort{Protocol: "TCP", Port: 8080}))
}

func mergeZones(a, b map[uint16][]string) map[uint16][]string {
	out := map[uint16][]string{}
	for _, m := range []map[uint16][]string{a, b} {
		for z, owners := range m {
			for _, o := range owners {
				found := false
				for _, x := range out[z] {
					found = found || x == o
				}
				if !found {
					out[z] = append(out[z], o)
				}
			}
		}
	}
	return out
}
