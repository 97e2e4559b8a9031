package service

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

func svc(mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
		}},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

type ep struct {
	ip                          string
	node                        string
	ready, serving, terminating *bool
}

func slice(addrType discoveryv1.AddressType, portName string, port int32, eps ...ep) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{AddressType: addrType,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}}}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip}, NodeName: ptr.To(e.node),
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}})
	}
	return s
}

func addrs(eps []endpoint) []string {
	var out []string
	for _, e := range eps {
		s := e.addr.String()
		if e.local {
			s += " local"
		}
		out = append(out, s)
	}
	return out
}

func TestDesiredPorts(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	yes, no := ptr.To(true), ptr.To(false)
	cases := []struct {
		name        string
		svc         *corev1.Service
		slices      []discoveryv1.EndpointSlice
		wantPorts   int
		wantEPs     []string
		unsupported []string
		ipv6Only    bool
		clusterIP   string
	}{
		{
			name: "slices merged and de-duplicated, FQDN slices ignored, local endpoints marked",
			svc:  svc(nil),
			slices: []discoveryv1.EndpointSlice{
				slice(v4, "http", 8080, ep{ip: "10.244.1.5", node: "node-a"}, ep{ip: "10.244.2.7", node: "node-b"}),
				slice(v4, "http", 8080, ep{ip: "10.244.2.7", node: "node-b"}),
				slice(discoveryv1.AddressTypeFQDN, "http", 8080, ep{ip: "example.com"}),
			},
			wantPorts: 1, wantEPs: []string{"10.244.1.5:8080 local", "10.244.2.7:8080"},
		},
		{
			name: "named target ports resolved per slice",
			svc:  svc(nil),
			slices: []discoveryv1.EndpointSlice{
				slice(v4, "http", 8080, ep{ip: "10.244.1.5", node: "node-a"}),
				slice(v4, "http", 9090, ep{ip: "10.244.2.7", node: "node-b"}),
				slice(v4, "metrics", 9100, ep{ip: "10.244.2.8", node: "node-b"}),
			},
			wantPorts: 1, wantEPs: []string{"10.244.1.5:8080 local", "10.244.2.7:9090"},
		},
		{
			name: "ready endpoints only while some are ready",
			svc:  svc(nil),
			slices: []discoveryv1.EndpointSlice{slice(v4, "http", 8080,
				ep{ip: "10.244.1.5", node: "node-a", ready: yes},
				ep{ip: "10.244.1.6", node: "node-a", ready: no, serving: yes, terminating: yes},
				ep{ip: "10.244.1.7", node: "node-a", ready: no, serving: no})},
			wantPorts: 1, wantEPs: []string{"10.244.1.5:8080 local"},
		},
		{
			name: "serving and terminating endpoints when none is ready",
			svc:  svc(nil),
			slices: []discoveryv1.EndpointSlice{slice(v4, "http", 8080,
				ep{ip: "10.244.1.6", node: "node-a", ready: no, serving: yes, terminating: yes},
				ep{ip: "10.244.1.7", node: "node-a", ready: no, serving: no, terminating: yes})},
			wantPorts: 1, wantEPs: []string{"10.244.1.6:8080 local"},
		},
		{name: "headless", svc: svc(func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone })},
		{name: "ExternalName", svc: svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName; s.Spec.ClusterIP = "" })},
		{name: "another proxy's", svc: svc(func(s *corev1.Service) { s.Labels = map[string]string{ServiceProxyNameLabel: "other"} })},
		{name: "labelled headless", svc: svc(func(s *corev1.Service) { s.Labels = map[string]string{HeadlessLabel: ""} })},
		{
			name: "IPv6 only (SingleStack IPv6 in a dual-stack cluster): not served",
			svc: svc(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00:10:96::10", []string{"fd00:10:96::10"}
				s.Spec.Type, s.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30080
			}),
			slices:   []discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv6, "http", 8080, ep{ip: "fd00:10:244:1::5", node: "node-a", ready: yes})},
			ipv6Only: true,
		},
		{
			name: "RequireDualStack, IPv6 first: served on its IPv4 ClusterIP with its IPv4 endpoints",
			svc: svc(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00:10:96::10", []string{"fd00:10:96::10", "10.96.0.10"}
			}),
			slices: []discoveryv1.EndpointSlice{
				slice(discoveryv1.AddressTypeIPv6, "http", 8080, ep{ip: "fd00:10:244:1::5", node: "node-a", ready: yes}),
				slice(v4, "http", 8080, ep{ip: "10.244.1.5", node: "node-a", ready: yes})},
			wantPorts: 1, wantEPs: []string{"10.244.1.5:8080 local"}, clusterIP: "10.96.0.10",
		},
		{
			name: "SCTP refused, the other ports kept",
			svc: svc(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 9})
			}),
			wantPorts: 1, unsupported: []string{"sig/SCTP"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := desiredPorts(tc.svc, tc.slices, "node-a")
			g.Expect(d.ports).To(HaveLen(tc.wantPorts))
			g.Expect(d.unsupported).To(Equal(tc.unsupported))
			g.Expect(d.ipv6Only).To(Equal(tc.ipv6Only))
			if tc.clusterIP != "" {
				g.Expect(d.ports[0].clusterIP.String()).To(Equal(tc.clusterIP))
			}
			if tc.wantPorts > 0 && tc.wantEPs != nil {
				g.Expect(addrs(d.ports[0].endpoints)).To(Equal(tc.wantEPs))
			}
		})
	}
}

func TestDesiredPortsNodePortAndProtocols(t *testing.T) {
	g := NewWithT(t)
	s := svc(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
			{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, NodePort: 30053},
		}
	})
	d := desiredPorts(s, nil, "node-a")
	g.Expect(d.ports).To(HaveLen(2))
	g.Expect(d.ports[0].protocol).To(Equal(openflow.ProtoUDP))
	g.Expect(d.ports[1].protocol).To(Equal(openflow.ProtoTCP))
	g.Expect(d.ports[0].nodePort).To(Equal(uint16(30053)))
	g.Expect(d.ports[0].clusterIP).To(Equal(netip.MustParseAddr("10.96.0.10")))
	g.Expect(d.ports[0].endpoints).To(BeEmpty())
}

// TestGroupIDsReused: the id of a Service port's group whose Service is gone is given to the next new
// one (lowest first), so ids stay few however many Services come and go; live groups keep theirs.
func TestGroupIDsReused(t *testing.T) {
	g := NewWithT(t)
	var a ids[groupKey]
	key := func(name string) groupKey {
		return groupKey{port: portKey{Namespace: "ns", Name: name, Protocol: corev1.ProtocolTCP, Port: 80}}
	}
	g.Expect([]uint32{a.get(key("a")), a.get(key("b")), a.get(key("c")), a.get(key("d"))}).To(Equal([]uint32{1, 2, 3, 4}))
	// c, then b are gone from the switch (a per-Service pass each), d too (a full pass).
	a.release(key("c"))
	a.release(key("b"))
	g.Expect(a.get(key("a"))).To(Equal(uint32(1)), "a live group keeps its id")
	g.Expect(a.get(key("e"))).To(Equal(uint32(2)), "the lowest freed id first")
	a.releaseUnused(func(k groupKey) bool { return k != key("d") })
	g.Expect(a.get(key("f"))).To(Equal(uint32(3)))
	g.Expect(a.get(key("g"))).To(Equal(uint32(4)))
	g.Expect(a.get(key("h"))).To(Equal(uint32(5)), "then new ids")
	_, ok := a.lookup(key("d"))
	g.Expect(ok).To(BeFalse())
}

// TestServiceAddresses: external IPs, load balancer ingress IPs (not those with ipMode Proxy, and only
// for type LoadBalancer), source ranges, traffic policies and session affinity (the default timeout,
// and a timeout above OpenFlow's 16-bit hard_timeout cut to 65535 s) as every port of the Service gets
// them.
func TestServiceAddresses(t *testing.T) {
	cases := []struct {
		name string
		svc  *corev1.Service
		want desiredPort
	}{
		{name: "plain ClusterIP", svc: svc(nil), want: desiredPort{}},
		{
			name: "LoadBalancer with external IPs, ingress IPs (one in ipMode Proxy), source ranges and traffic policies Local",
			svc: svc(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalIPs = []string{"192.168.1.10", "fd00::10"}
				s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8", " 192.168.1.7/32 "}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
					{IP: "192.168.1.20"}, {IP: "192.168.1.21", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}, {Hostname: "lb.example"},
				}
			}),
			want: desiredPort{
				externalIPs:     []netip.Addr{netip.MustParseAddr("192.168.1.10")},
				loadBalancerIPs: []netip.Addr{netip.MustParseAddr("192.168.1.20")},
				sourceRanges:    []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")},
				internalLocal:   true, externalLocal: true,
			},
		},
		{
			name: "ingress IPs of a Service that is not a LoadBalancer are ignored",
			svc: svc(func(s *corev1.Service) {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.1.20"}}
			}),
			want: desiredPort{},
		},
		{
			name: "session affinity ClientIP with the default timeout",
			svc:  svc(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }),
			want: desiredPort{affinityTimeout: 10800},
		},
		{
			name: "session affinity ClientIP with the API's maximum, cut to OpenFlow's",
			svc: svc(func(s *corev1.Service) {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86400)}}
			}),
			want: desiredPort{affinityTimeout: MaxAffinityTimeout},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(serviceAddresses(tc.svc)).To(Equal(tc.want))
		})
	}
}
