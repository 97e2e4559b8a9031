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
// passes, which every change of the registry queues. A hostPort wins over a Service's NodePort
// on the same port and protocol on its node: the NodePort is not served there while the hostPort
// holds it (the Service gets a Warning Event naming the Pod), whichever came first.

// hostPortsName is the cookie object and the realised entry of the hostPorts: no Service has an
// empty namespace, and no work item is queued for it.
var hostPortsName = types.NamespacedName{Name: "hostports"}

// HostPortHeldReason is the reason of the Warning Event on a Service whose NodePort a hostPort
// of a Pod of the node holds.
const HostPortHeldReason = "NodePortHeldByHostPort"

// heldPorts are the ports the registry's mappings hold, each with its holders' description.
func heldPorts(entries []hostport.Entry) map[hostnet.NodePort]string {
	held := map[hostnet.NodePort]string{}
	for _, e := range entries {
		for _, m := range e.Mappings {
			np := hostnet.NodePort{Protocol: m.Protocol, Port: m.HostPort}
			desc := fmt.Sprintf("hostPort %s of Pod %s", m, e.Pod)
			if held[np] != "" {
				desc = held[np] + ", " + desc
			}
			held[np] = desc
		}
	}
	return held
}

// blockHeldNodePorts takes the NodePorts a hostPort holds out of rs's ports (their ClusterIP,
// external IPs and load balancer IPs stay served) and warns the Service.
func (r *Reconciler) blockHeldNodePorts(ctx context.Context, svc *corev1.Service, rs *realisedService) {
	for i := range rs.d.ports {
		p := &rs.d.ports[i]
		if p.nodePort == 0 {
			continue
		}
		np := hostnet.NodePort{Protocol: string(p.key.Protocol), Port: p.nodePort}
		holder, ok := r.held[np]
		if !ok {
			continue
		}
		if rs.blocked == nil {
			rs.blocked = map[hostnet.NodePort]string{}
		}
		rs.blocked[np] = holder
		p.nodePort = 0
	}
	if len(rs.blocked) > 0 {
		r.warnHeld(ctx, svc, rs.blocked)
	}
}

// hasNodePorts tells whether the Service asks for NodePorts (served or blocked).
func (rs *realisedService) hasNodePorts() bool {
	if len(rs.blocked) > 0 {
		return true
	}
	for _, p := range rs.d.ports {
		if p.nodePort != 0 {
			return true
		}
	}
	return false
}

// warnHeld emits one Warning Event per Service version and set of holders.
func (r *Reconciler) warnHeld(ctx context.Context, svc *corev1.Service, blocked map[hostnet.NodePort]string) {
	var parts []string
	for _, np := range slices.SortedFunc(maps.Keys(blocked), compareNodePorts) {
		parts = append(parts, fmt.Sprintf("NodePort %d/%s (held by %s)", np.Port, np.Protocol, blocked[np]))
	}
	msg := strings.Join(parts, "; ")
	if r.warnedHeld == nil {
		r.warnedHeld = map[types.UID]string{}
	}
	if r.warnedHeld[svc.UID] == svc.ResourceVersion+"|"+msg {
		return
	}
	r.warnedHeld[svc.UID] = svc.ResourceVersion + "|" + msg
	ctrl.LoggerFrom(ctx).Info("NodePorts not served: hostPorts hold them", "service", client.ObjectKeyFromObject(svc), "nodePorts", msg)
	if r.Recorder != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, HostPortHeldReason, "Proxy",
			"Not served on node %s, where a hostPort wins over a NodePort: %s", r.NodeName, msg)
	}
}

func compareNodePorts(a, b hostnet.NodePort) int {
	return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
}

// realiseHostPorts computes the groups and flows of every hostPort mapping of entries. Of the
// mappings of one port and protocol on several hostIPs, the first (by sandbox) serves the host's
// own connections: the host's NAT knows ports, not addresses.
func (r *Reconciler) realiseHostPorts(entries []hostport.Entry, rz nodenetwork.Realized, ips []netip.Addr) *realisedService {
	rs := &realisedService{}
	hostServed := map[hostnet.NodePort]bool{}
	for _, e := range entries {
		if !e.IP.Is4() {
			continue
		}
		for _, m := range e.Mappings {
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
	}
	if len(rs.d.ports) == 0 {
		return rs
	}
	r.realisePorts(hostPortsName, rs, rz, ips)
	rs.counts = counts{} // not Services
	return rs
}
