package service

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

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
// first serves the host's own connections; a hostPort on a Service's NodePort is not served
// (the NodePort wins) and its Pod gets one Warning Event that names no Service of another
// namespace; every flow and group passes the Windows datapath profile. It also pins the cost per mapping.
func TestRealiseHostPorts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nodeIP, second := netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.20")
	rz := nodenetwork.Realized{Node: pipeline.Node{NodeIP: nodeIP, PodCIDR: netip.MustParsePrefix("10.244.1.0/24"),
		GatewayIP: netip.MustParseAddr("10.244.1.1"), UplinkOFPort: 1, GatewayOFPort: 2},
		BridgeAddresses: []netip.Prefix{netip.PrefixFrom(nodeIP, 24), netip.PrefixFrom(second, 24)}}
	reg := hostport.NewRegistry()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{NodeName: "node", HostPorts: reg, NodePorts: fakeNAT{}, Recorder: rec}
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
	svc.Namespace, svc.Name, svc.UID, svc.ResourceVersion = "other", "np", "np-uid", "1"
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
		{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 8080}}}
	for range 2 { // the second pass warns no more
		r.desired(ctx, rz, []corev1.Service{*svc}, map[ktypes.NamespacedName][]discoveryv1.EndpointSlice{})
	}
	g.Expect(rec.Events).To(HaveLen(1))
	ev := <-rec.Events
	g.Expect(ev).To(ContainSubstring("Warning " + HostPortHeldReason))
	g.Expect(ev).To(ContainSubstring("hostPort 0.0.0.0:8080/TCP->80 (NodePort of a Service of another namespace)"))
	g.Expect(ev).NotTo(ContainSubstring("other/np"), "a Pod's Event names no Service of another namespace")
	hp = r.realised[hostPortsName]
	g.Expect(hp.groups).To(HaveLen(3+2), "the TCP hostPort is not served; one UDP mapping serves the host's connections to 5353 (the first by sandbox), the other not")
	for _, p := range hp.d.ports {
		g.Expect(p.nodePort).NotTo(BeEquivalentTo(8080), "the hostPort a NodePort holds is not served")
	}
	np := r.realised[ktypes.NamespacedName{Namespace: "other", Name: "np"}]
	g.Expect(np.nodePorts).To(ContainElement(hostnet.NodePort{Protocol: "TCP", Port: 8080}), "the NodePort wins")
	t.Logf("2 UDP hostPorts on one hostIP each, in zones of their own, one serving the host: %d flows", len(hp.flows))

	g.Expect(reg.Claim(hostport.Entry{Sandbox: "d", Pod: "ns/late", Mappings: []hostport.Mapping{
		{HostIP: nodeIP, HostPort: 8080, ContainerPort: 80, Protocol: "TCP"},
	}})).To(MatchError(ContainSubstring("is NodePort 8080/TCP of a Service of another namespace")), "an ADD on a NodePort's port is refused")
	groups, flows, _ := r.desired(ctx, rz, []corev1.Service{*svc}, map[ktypes.NamespacedName][]discoveryv1.EndpointSlice{})

	d := pipeline.Datapath{Flows: append(rz.Node.BaseFlows(), flows...), Groups: groups, NATZones: rz.Node.NATZones()}
	for _, p := range hp.d.ports {
		sp := pipeline.ServicePort{Protocol: p.protocol, UDPZone: r.udp.zone(p.key)}
		d.NATZones = mergeZones(d.NATZones, sp.NATZones())
	}
	g.Expect(pipeline.CheckWindows(d)).To(BeEmpty())

	// The Service gone: the hostPort is served again.
	r.desired(ctx, rz, nil, nil)
	hp = r.realised[hostPortsName]
	g.Expect(hp.groups).To(HaveLen(3+3+2), "the TCP hostPort is served again once the NodePort is gone")
	g.Expect(r.nodePorts).To(HaveKey(hostnet.NodePort{Protocol: "TCP", Port: 8080}))
}

// TestNodePortTakenNeedsFullPass: a Service's NodePorts that take or give back a claimed
// hostPort's port are reported (the Service's pass then runs as the full pass, which serves or stops
// serving the hostPort); NodePorts on other ports or protocols are not.
func TestNodePortTakenNeedsFullPass(t *testing.T) {
	g := NewWithT(t)
	reg := hostport.NewRegistry()
	g.Expect(reg.Claim(hostport.Entry{Sandbox: "a", Pod: "ns/web", IP: netip.MustParseAddr("10.244.1.5"), Mappings: []hostport.Mapping{
		{HostIP: netip.IPv4Unspecified(), HostPort: 30080, ContainerPort: 80, Protocol: "TCP"},
	}})).To(Succeed())
	svc := &corev1.Service{}
	svc.Spec.Ports = []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30081}}
	g.Expect(reg.SetServiceNodePorts("other/np", serviceNodePorts(svc))).To(BeFalse(), "another port")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolUDP, Port: 81, NodePort: 30080})
	g.Expect(reg.SetServiceNodePorts("other/np", serviceNodePorts(svc))).To(BeFalse(), "another protocol")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 82, NodePort: 30080})
	g.Expect(reg.SetServiceNodePorts("other/np", serviceNodePorts(svc))).To(BeTrue(), "the hostPort's port taken")
	g.Expect(reg.HeldBy(hostport.Mapping{HostIP: netip.IPv4Unspecified(), HostPort: 30080, Protocol: "TCP"})).To(Equal([]string{"other/np"}))
	g.Expect(reg.SetServiceNodePorts("other/np", serviceNodePorts(svc))).To(BeFalse(), "no change")
	g.Expect(reg.SetServiceNodePorts("other/np", serviceNodePorts(nil))).To(BeTrue(), "the port given back")
	g.Expect(reg.HeldBy(hostport.Mapping{HostIP: netip.IPv4Unspecified(), HostPort: 30080, Protocol: "TCP"})).To(BeEmpty())
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
