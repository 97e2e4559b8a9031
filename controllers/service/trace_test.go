package service

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestTraceEndpoints: a trace finds the endpoints of the realised Service port it is sent to, by
// every address a Pod's connection is balanced on (ClusterIP, external IP, load balancer IP
// without source ranges, NodePort on a node address), only the local ones under
// internalTrafficPolicy Local; nothing for another port, protocol or address.
func TestTraceEndpoints(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	eps := []discoveryv1.EndpointSlice{slice(v4, "http", 8080, ep{ip: "10.244.1.5", node: "node-a"}, ep{ip: "10.244.2.7", node: "node-b"})}
	web := svc(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalIPs = []string{"192.0.2.10"}
	})
	local := svc(func(s *corev1.Service) {
		s.Name, s.Spec.ClusterIP = "local", "10.96.0.11"
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	})
	r := &Reconciler{NodeName: "node-a", realisedIPs: []netip.Addr{netip.MustParseAddr("192.168.77.11")}, realised: map[types.NamespacedName]*realisedService{
		{Namespace: "ns", Name: "web"}:   {d: desiredPorts(web, eps, "node-a")},
		{Namespace: "ns", Name: "local"}: {d: desiredPorts(local, eps, "node-a")},
	}}
	both := []pipeline.Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), Local: true}, {Addr: netip.MustParseAddrPort("10.244.2.7:8080")}}
	for _, dst := range []string{"10.96.0.10:80", "192.0.2.10:80", "192.168.77.11:30080"} {
		got, ok := r.TraceEndpoints(openflow.ProtoTCP, netip.MustParseAddrPort(dst))
		NewWithT(t).Expect(ok).To(BeTrue(), dst)
		NewWithT(t).Expect(got).To(Equal(both), dst)
	}
	g := NewWithT(t)
	got, ok := r.TraceEndpoints(openflow.ProtoTCP, netip.MustParseAddrPort("10.96.0.11:80"))
	g.Expect(ok).To(BeTrue())
	g.Expect(got).To(Equal(both[:1]), "internalTrafficPolicy Local: the local endpoint only")
	for _, dst := range []string{"10.96.0.10:81", "10.96.0.12:80", "192.168.77.12:30080"} {
		_, ok := r.TraceEndpoints(openflow.ProtoTCP, netip.MustParseAddrPort(dst))
		g.Expect(ok).To(BeFalse(), dst)
	}
	_, ok = r.TraceEndpoints(openflow.ProtoUDP, netip.MustParseAddrPort("10.96.0.10:80"))
	g.Expect(ok).To(BeFalse(), "another protocol")
}
