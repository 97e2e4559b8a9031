package service

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// HostPorts: each hostPort mapping of a local Pod (hostport.Registry, claimed by the CNI ADD) is
// realised as a NodePort with one local endpoint, the Pod's address and containerPort, served on
// the mapping's hostIP (every node address for 0.0.0.0):
//   - clients on the uplink reach it through the port's external group and keep their source
//     address (the endpoint is local: no Service SNAT), so the Pod's NetworkPolicy sees them;
//   - other nodes' Pods and hosts (through the tunnel) and the node's Pods reach it through the
//     cluster group; the target Pod itself through the hairpin flows;
//   - the host's own connections through the host-side NAT of NodePorts (hostnet.NodePortNAT) and
//     the host group, SNATed to the gateway IP like the host's NodePort connections.
//
// Every mapping's flows are under one cookie object (hostPortsName) and change only in full
// passes, which every change of the registry queues. A Service's NodePort wins over a hostPort on
// the same port and protocol (see hostport.Registry for why): the ADD of a Pod whose hostPort is
// a NodePort fails, and a hostPort whose port a Service takes later is not served while the
// NodePort exists (the Pod gets a Warning Event, HostPortHeldReason).

// hostPortsName is the cookie object and the realised entry of the hostPorts: no Service has an
// empty namespace, and no work item is queued for it.
var hostPortsName = types.NamespacedName{Name: "hostports"}

// HostPortHeldReason is the reason of the Warning Event on a Pod whose hostPort a Service's
// NodePort holds.
const HostPortHeldReason = "HostPortHeldByNodePort"

// serviceNodePorts are the NodePorts a Service asks for (whether or not this node serves them):
// none for a Service that is gone.
func serviceNodePorts(svc *corev1.Service) []hostport.Port {
	if svc == nil {
		return nil
	}
	var out []hostport.Port
	for _, p := range svc.Spec.Ports {
		if p.NodePort > 0 && p.NodePort <= 65535 && (p.Protocol == corev1.ProtocolTCP || p.Protocol == corev1.ProtocolUDP) {
			out = append(out, hostport.Port{Protocol: string(p.Protocol), Port: uint16(p.NodePort)})
		}
	}
	return out
}

// allNodePorts are the NodePorts of every Service, by "namespace/name".
func allNodePorts(services []corev1.Service) map[string][]hostport.Port {
	out := map[string][]hostport.Port{}
	for i := range services {
		if ports := serviceNodePorts(&services[i]); len(ports) > 0 {
			out[client.ObjectKeyFromObject(&services[i]).String()] = ports
		}
	}
	return out
}

// warnHeld emits a Warning Event on the Pod whose mappings NodePorts hold, once per message. The
// Event is read by the Pod's namespace: a Service of another namespace is not named in it (the
// agent's log names it).
func (r *Reconciler) warnHeld(ctx context.Context, e hostport.Entry, held map[hostport.Mapping][]string) {
	ns, name, _ := strings.Cut(e.Pod, "/")
	var parts, logParts []string
	for _, m := range slices.SortedFunc(maps.Keys(held), compareMappings) {
		parts = append(parts, fmt.Sprintf("hostPort %s (NodePort of %s)", m, hostport.Describe("Service", held[m][0], ns)))
		logParts = append(logParts, fmt.Sprintf("hostPort %s (NodePort of Service %s)", m, strings.Join(held[m], ", ")))
	}
	msg := strings.Join(parts, "; ")
	key := cmp.Or(e.PodUID, e.Pod)
	if r.warnedHeld == nil {
		r.warnedHeld = map[string]string{}
	}
	if r.warnedHeld[key] == msg {
		return
	}
	r.warnedHeld[key] = msg
	ctrl.LoggerFrom(ctx).Info("hostPorts not served: Services' NodePorts hold them", "pod", e.Pod, "sandbox", e.Sandbox, "hostPorts", strings.Join(logParts, "; "))
	if r.Recorder != nil {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(e.PodUID)}}
		r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, HostPortHeldReason, "Proxy",
			"Not served on node %s, where a Service's NodePort wins over a hostPort: %s", r.NodeName, msg)
	}
}

func compareMappings(a, b hostport.Mapping) int {
	return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.HostPort, b.HostPort), a.HostIP.Compare(b.HostIP))
}

// realiseHostPorts computes the groups and flows of every hostPort mapping of entries that no
// Service's NodePort holds. Of the mappings of one port and protocol on several hostIPs, the first
// (by sandbox) serves the host's own connections: the host's NAT knows ports, not addresses.
func (r *Reconciler) realiseHostPorts(ctx context.Context, entries []hostport.Entry, rz nodenetwork.Realized, ips []netip.Addr) *realisedService {
	rs := &realisedService{}
	hostServed := map[hostnet.NodePort]bool{}
	warned := map[string]bool{}
	for _, e := range entries {
		if !e.IP.Is4() {
			continue
		}
		held := map[hostport.Mapping][]string{}
		for _, m := range e.Mappings {
			if svcs := r.HostPorts.HeldBy(m); len(svcs) > 0 {
				held[m] = svcs
				continue
			}
			proto := uint8(openflow.ProtoTCP)
			if m.Protocol == "UDP" {
				proto = openflow.ProtoUDP
			}
			np := hostnet.NodePort{Protocol: m.Protocol, Port: m.HostPort}
			p := desiredPort{
				key:      portKey{Name: hostPortsName.Name, PortName: e.Sandbox + "/" + m.HostIP.String(), Protocol: corev1.Protocol(m.Protocol), Port: int32(m.HostPort)},
				protocol: proto, nodePort: m.HostPort, externalLocal: true, noHost: hostServed[np],
				endpoints: []endpoint{{addr: netip.AddrPortFrom(e.IP, m.ContainerPort), local: true}},
			}
			if !m.Any() {
				p.nodeIPs = []netip.Addr{m.HostIP}
			}
			hostServed[np] = true
			rs.d.ports = append(rs.d.ports, p)
		}
		if len(held) > 0 {
			key := cmp.Or(e.PodUID, e.Pod)
			warned[key] = true
			r.warnHeld(ctx, e, held)
		}
	}
	for key := range r.warnedHeld {
		if !warned[key] {
			delete(r.warnedHeld, key) // served again, or gone: warn anew if it is held again
		}
	}
	if len(rs.d.ports) == 0 {
		return rs
	}
	r.realisePorts(hostPortsName, rs, rz, ips)
	rs.counts = counts{} // not Services
	return rs
}
