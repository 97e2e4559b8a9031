package service

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Labels that take a Service out of the agent's hands, as kube-proxy honours them.
const (
	// ServiceProxyNameLabel names another proxy that serves the Service.
	ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"
	// HeadlessLabel marks a Service as headless whatever its ClusterIP.
	HeadlessLabel = "service.kubernetes.io/headless"
)

// skipReason says why a Service is not proxied; empty when it is.
func skipReason(svc *corev1.Service) string {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "ExternalName"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless"
	}
	if _, ok := svc.Labels[ServiceProxyNameLabel]; ok {
		return "served by another proxy"
	}
	if _, ok := svc.Labels[HeadlessLabel]; ok {
		return "labelled headless"
	}
	return ""
}

// portKey identifies a Service port: its protocol and port number on the ClusterIP.
type portKey struct {
	Namespace, Name string
	PortName        string
	Protocol        corev1.Protocol
	Port            int32
}

// desiredPort is one Service port as it should be realised (IPv4).
type desiredPort struct {
	key       portKey
	clusterIP netip.Addr
	protocol  uint8
	nodePort  uint16
	endpoints []endpoint
	// addresses: the external IPs, load balancer IPs and source ranges of the Service.
	externalIPs, loadBalancerIPs []netip.Addr
	sourceRanges                 []netip.Prefix
	// internalLocal and externalLocal are the traffic policies Local.
	internalLocal, externalLocal bool
	// affinityTimeout is the ClientIP session affinity timeout in seconds, 0 for none.
	affinityTimeout uint16
	// nodeIPs, when not nil, are the only node addresses the NodePort is served on (a hostPort's
	// hostIP); noHost leaves the host's own connections to the NodePort to another port's group
	// (a hostPort whose port another hostIP's mapping serves the host on, hostports.go).
	nodeIPs []netip.Addr
	noHost  bool
}

// MaxAffinityTimeout is the longest session affinity winnet realises: a learned flow's
// hard_timeout is 16 bits in OpenFlow, so longer timeouts (the API allows up to 86400 s) are cut
// to 65535 s (18 h 12 min).
const MaxAffinityTimeout = 65535

// serviceAddresses are what every port of a Service shares: external IPs, load balancer IPs
// (those of ingress entries with ipMode Proxy are the load balancer's own and not served, as
// kube-proxy does), source ranges, traffic policies and session affinity.
func serviceAddresses(svc *corev1.Service) desiredPort {
	var p desiredPort
	for _, s := range svc.Spec.ExternalIPs {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			p.externalIPs = append(p.externalIPs, a)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy {
				continue
			}
			if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
				p.loadBalancerIPs = append(p.loadBalancerIPs, a)
			}
		}
		for _, s := range svc.Spec.LoadBalancerSourceRanges {
			if r, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil && r.Addr().Is4() {
				p.sourceRanges = append(p.sourceRanges, r.Masked())
			}
		}
	}
	p.internalLocal = svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	p.externalLocal = svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		timeout := int32(corev1.DefaultClientIPServiceAffinitySeconds)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			timeout = *c.ClientIP.TimeoutSeconds
		}
		p.affinityTimeout = uint16(min(max(timeout, 1), MaxAffinityTimeout))
	}
	return p
}

// endpoint is one endpoint of a Service port.
type endpoint struct {
	addr  netip.AddrPort
	local bool
}

// desiredService is what to realise for one Service: its ports, and the ports it asks for that
// cannot be realised (SCTP), for the Warning Event.
type desiredService struct {
	ports       []desiredPort
	unsupported []string
	// ipv6Only is set for a Service whose ClusterIPs are all IPv6 (SingleStack IPv6 in a dual-stack
	// cluster): winnet's Windows data plane is IPv4, so it is not served on the node (said in an
	// Event), as the IPv4 proxy of a dual-stack kube-proxy does not serve it either.
	ipv6Only bool
}

// desiredPorts computes the Service's ports and their endpoints from its EndpointSlices, as
// kube-proxy does: every slice of the Service (IPv4 slices only; FQDN slices are ignored) merged and
// de-duplicated, ready endpoints, or serving-and-terminating ones when none is ready, target ports
// by name resolved per slice. nodeName tells the local endpoints.
func desiredPorts(svc *corev1.Service, slices_ []discoveryv1.EndpointSlice, nodeName string) desiredService {
	var out desiredService
	if skipReason(svc) != "" {
		return out
	}
	clusterIP := netip.Addr{}
	ipv6 := false
	for _, s := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		a, err := netip.ParseAddr(s)
		if err == nil && a.Is4() {
			clusterIP = a
			break
		}
		ipv6 = ipv6 || (err == nil && a.Is6())
	}
	if !clusterIP.IsValid() && ipv6 {
		out.ipv6Only = true
		return out
	}
	for _, sp := range svc.Spec.Ports {
		var proto uint8
		switch sp.Protocol {
		case corev1.ProtocolTCP, "":
			proto = openflow.ProtoTCP
		case corev1.ProtocolUDP:
			proto = openflow.ProtoUDP
		default:
			out.unsupported = append(out.unsupported, portName(sp))
			continue
		}
		p := serviceAddresses(svc)
		p.key = portKey{Namespace: svc.Namespace, Name: svc.Name, PortName: sp.Name, Protocol: cmp.Or(sp.Protocol, corev1.ProtocolTCP), Port: sp.Port}
		p.clusterIP, p.protocol = clusterIP, proto
		if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			p.nodePort = uint16(sp.NodePort)
		}
		p.endpoints = chooseEndpoints(sp, slices_, nodeName)
		out.ports = append(out.ports, p)
	}
	return out
}

func portName(sp corev1.ServicePort) string {
	if sp.Name != "" {
		return sp.Name + "/" + string(sp.Protocol)
	}
	return string(sp.Protocol)
}

// chooseEndpoints returns the endpoints of one Service port: ready ones, else serving and
// terminating ones (kube-proxy's CategorizeEndpoints without topology), de-duplicated and sorted.
func chooseEndpoints(sp corev1.ServicePort, eps []discoveryv1.EndpointSlice, nodeName string) []endpoint {
	ready := map[netip.AddrPort]endpoint{}
	fallback := map[netip.AddrPort]endpoint{}
	for i := range eps {
		s := &eps[i]
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue // FQDN slices are ignored; IPv6 comes with dual-stack
		}
		// The slice's port of the same name carries the target port resolved for its endpoints.
		var port int32
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == sp.Name && p.Port != nil && cmp.Or(ptrVal(p.Protocol), corev1.ProtocolTCP) == cmp.Or(sp.Protocol, corev1.ProtocolTCP) {
				port = *p.Port
				break
			}
		}
		if port <= 0 || port > 65535 {
			continue
		}
		for _, e := range s.Endpoints {
			c := e.Conditions
			isReady := c.Ready == nil || *c.Ready
			serving := c.Serving == nil && isReady || c.Serving != nil && *c.Serving
			terminating := c.Terminating != nil && *c.Terminating
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || !ip.Is4() {
					continue
				}
				ep := endpoint{addr: netip.AddrPortFrom(ip, uint16(port)), local: e.NodeName != nil && *e.NodeName == nodeName}
				switch {
				case isReady:
					ready[ep.addr] = ep
				case serving && terminating:
					fallback[ep.addr] = ep
				}
			}
		}
	}
	chosen := ready
	if len(chosen) == 0 {
		chosen = fallback
	}
	out := make([]endpoint, 0, len(chosen))
	for _, ep := range chosen {
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
	return out
}

func ptrVal[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
