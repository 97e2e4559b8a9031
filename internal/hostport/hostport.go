// Package hostport holds a node's hostPort mappings: the runtime's portMappings (the CNI
// "portMappings" capability) checked, the node's claims on its ports, and the record of each
// sandbox's mappings the agent keeps beside (not in) its attachment records.
//
// A mapping is realised as a NodePort with one local endpoint (controllers/service): the same
// flows serve clients on the uplink (their source kept), other nodes' Pods and hosts through the
// tunnel, the node's Pods (the target Pod itself through the hairpin flows) and the host's own
// connections (the host-side NAT of NodePorts, hostnet.NodePortNAT).
package hostport

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"
)

// ErrConflict is the CNI error code (plugin-specific, 100 and above, CNI spec 1.1 "Error") of an
// ADD refused because another Pod of the node holds the hostPort it asks for.
const ErrConflict uint = 100

// PortMapping is one entry of runtimeConfig.portMappings as containerd and CRI-O pass it (the
// portmap plugin's convention: protocol in lower case, hostIP empty for every address).
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Mapping is one checked hostPort mapping.
type Mapping struct {
	// HostIP is the node address the mapping is served on; 0.0.0.0 for every node address.
	HostIP        netip.Addr `json:"hostIP"`
	HostPort      uint16     `json:"hostPort"`
	ContainerPort uint16     `json:"containerPort"`
	// Protocol is "TCP" or "UDP".
	Protocol string `json:"protocol"`
}

// Any reports whether the mapping is served on every node address.
func (m Mapping) Any() bool { return m.HostIP.IsUnspecified() }

// String renders the mapping as hostIP:hostPort/protocol->containerPort.
func (m Mapping) String() string {
	return fmt.Sprintf("%s/%s->%d", netip.AddrPortFrom(m.HostIP, m.HostPort), m.Protocol, m.ContainerPort)
}

// overlaps reports whether two mappings claim the same packets: the same port and protocol on the
// same address, or on any address for either.
func (m Mapping) overlaps(o Mapping) bool {
	return m.HostPort == o.HostPort && m.Protocol == o.Protocol && (m.Any() || o.Any() || m.HostIP == o.HostIP)
}

// Parse checks the runtime's portMappings and returns them as mappings, or a CNI error
// (ErrInvalidNetworkConfig) that names the entry at fault: a port out of 1..65535, a protocol
// other than TCP and UDP (SCTP: the Windows datapath's conntrack cannot track it), a hostIP that
// is not an IPv4 address or is a loopback address. Whether the hostIP is the node's is for the caller (CheckHostIPs). The
// same entry twice is one mapping.
func Parse(entries []PortMapping) ([]Mapping, error) {
	var out []Mapping
	for i, e := range entries {
		bad := func(format string, a ...any) error {
			return types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("runtimeConfig.portMappings[%d] (hostPort %d, containerPort %d, protocol %q, hostIP %q): ", i, e.HostPort, e.ContainerPort, e.Protocol, e.HostIP)+fmt.Sprintf(format, a...), "")
		}
		if e.HostPort < 1 || e.HostPort > 65535 {
			return nil, bad("hostPort %d is out of range 1-65535", e.HostPort)
		}
		if e.ContainerPort < 1 || e.ContainerPort > 65535 {
			return nil, bad("containerPort %d is out of range 1-65535", e.ContainerPort)
		}
		m := Mapping{HostPort: uint16(e.HostPort), ContainerPort: uint16(e.ContainerPort), HostIP: netip.IPv4Unspecified()}
		switch strings.ToUpper(e.Protocol) {
		case "TCP", "":
			m.Protocol = "TCP"
		case "UDP":
			m.Protocol = "UDP"
		case "SCTP":
			return nil, bad("SCTP is not supported on winnet nodes: the Windows datapath's conntrack tracks only TCP, UDP and ICMP")
		default:
			return nil, bad("unknown protocol %q (TCP or UDP)", e.Protocol)
		}
		if e.HostIP != "" {
			ip, err := netip.ParseAddr(e.HostIP)
			switch {
			case err != nil:
				return nil, bad("hostIP %q is not an IP address", e.HostIP)
			case ip.Is4In6():
				ip = ip.Unmap()
			case !ip.Is4() && !ip.IsUnspecified():
				return nil, bad("hostIP %s is not an IPv4 address: winnet serves hostPorts on IPv4 only", ip)
			}
			if ip.IsUnspecified() {
				ip = netip.IPv4Unspecified() // "::" is every address too
			}
			if ip.IsLoopback() {
				// Only the node's own connections could reach it, and winnet NATs those into the
				// switch with WinNAT, which is not known to NAT the host's loopback connections
				// (Kubernetes' own test of a 127.0.0.1 hostIP is [LinuxOnly]).
				return nil, bad("hostIP %s is a loopback address: winnet serves hostPorts on the node's other addresses only", ip)
			}
			m.HostIP = ip
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	for i, m := range out {
		for _, o := range out[:i] {
			if m.overlaps(o) {
				return nil, types.NewError(types.ErrInvalidNetworkConfig,
					fmt.Sprintf("runtimeConfig.portMappings: %s and %s claim the same host port", o, m), "")
			}
		}
	}
	return out, nil
}

// CheckHostIPs refuses (ErrInvalidNetworkConfig) a mapping whose hostIP is not one of the node's
// addresses.
func CheckHostIPs(mappings []Mapping, nodeIPs []netip.Addr) error {
	for _, m := range mappings {
		if !m.Any() && !slices.Contains(nodeIPs, m.HostIP) {
			return types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("runtimeConfig.portMappings: hostIP %s of %s is not one of the node's addresses (%s)", m.HostIP, m, joinAddrs(nodeIPs)), "")
		}
	}
	return nil
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// Reserved is a port the node needs for itself, never given to a Pod.
type Reserved struct {
	Protocol string
	Port     uint16
	// What says what uses it ("RDP").
	What string
}

// DefaultReserved are the ports every Windows node needs: remote access and management (RDP, WinRM,
// SMB), kubelet, and the tunnels' UDP ports (VXLAN, Geneve). The agent adds its own health and
// metrics ports and the node's configured tunnel port.
var DefaultReserved = []Reserved{
	{"TCP", 3389, "Remote Desktop (RDP)"}, {"UDP", 3389, "Remote Desktop (RDP)"},
	{"TCP", 5985, "WinRM (HTTP)"}, {"TCP", 5986, "WinRM (HTTPS)"},
	{"TCP", 445, "SMB"},
	{"TCP", 10250, "kubelet"},
	{"UDP", 4789, "the VXLAN tunnel"}, {"UDP", 6081, "the Geneve tunnel"},
}

// Entry is one sandbox's mappings: the Pod, its address (the endpoints' address; invalid until
// the sandbox is attached) and its mappings.
type Entry struct {
	Sandbox string
	// Pod is "namespace/name" (a string: the shim links this package, and no Kubernetes library);
	// PodUID its UID when known (for Events on the Pod).
	Pod      string
	PodUID   string
	IP       netip.Addr
	Mappings []Mapping
}

// namespace is the namespace of a "namespace/name".
func namespace(pod string) string {
	ns, _, _ := strings.Cut(pod, "/")
	return ns
}

// Port is a port of the node and its protocol ("TCP" or "UDP").
type Port struct {
	Protocol string
	Port     uint16
}

// Describe names what holds a node port for a Pod of namespace ns: the holder in full when it is
// of the same namespace; otherwise only what kind of holder it is, as a Pod's events and errors
// are read by its namespace's users, who must not learn another namespace's names through them
// (the agent's log has both sides).
func Describe(kind, holder, ns string) string {
	if namespace(holder) == ns {
		return kind + " " + holder
	}
	return "a " + kind + " of another namespace"
}

// Registry holds the node's hostPort claims. It is safe for concurrent use.
//
// It also holds the ports of the cluster's Services' NodePorts (SetServiceNodePorts), which win
// over hostPorts: a NodePort is the cluster's, allocated by the API server to a Service, while a
// hostPort is taken by whoever may create a Pod on the node, and letting it win would let a Pod of
// one namespace receive the NodePort traffic of another namespace's Service.
type Registry struct {
	mu        sync.Mutex
	reserved  []Reserved
	bySandbox map[string]Entry
	// nodePorts are the Services ("namespace/name") of each NodePort; byService the NodePorts of
	// each Service.
	nodePorts map[Port][]string
	byService map[string][]Port
	subs      []chan struct{}
}

// NewRegistry returns a registry that refuses the reserved ports (DefaultReserved and extra).
func NewRegistry(extra ...Reserved) *Registry {
	return &Registry{reserved: slices.Concat(DefaultReserved, extra), bySandbox: map[string]Entry{},
		nodePorts: map[Port][]string{}, byService: map[string][]Port{}}
}

// Claim records e's mappings, at the sandbox's ADD, unless one of them is a port the node needs
// (extra, such as the node's configured tunnel port, besides the registry's own), a Service's
// NodePort, or overlaps another sandbox's mapping: the CNI error then says which (naming the other
// side where the Pod's namespace may know it, see Describe). A sandbox's claim replaces what it
// claimed.
func (r *Registry) Claim(e Entry, extra ...Reserved) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := namespace(e.Pod)
	for _, m := range e.Mappings {
		for _, res := range slices.Concat(r.reserved, extra) {
			if res.Protocol == m.Protocol && res.Port == m.HostPort {
				return types.NewError(types.ErrInvalidNetworkConfig,
					fmt.Sprintf("hostPort %d/%s of Pod %s is reserved on this node for %s", m.HostPort, m.Protocol, e.Pod, res.What), "")
			}
		}
		if svcs := r.nodePorts[Port{m.Protocol, m.HostPort}]; len(svcs) > 0 {
			return types.NewError(ErrConflict,
				fmt.Sprintf("hostPort %s of Pod %s is NodePort %d/%s of %s, and a Service's NodePort wins over a hostPort on winnet nodes", m, e.Pod, m.HostPort, m.Protocol, Describe("Service", svcs[0], ns)), "")
		}
	}
	if err := r.overlap(e); err != nil {
		return err
	}
	r.put(e)
	return nil
}

// Restore records e's mappings again at the agent's start-up, from the sandbox's record: only
// another sandbox's overlapping claim refuses it. The node's reserved ports and the Services'
// NodePorts are not checked again: a mapping on a port a NodePort took since is kept, and not
// served (HeldBy), so that it is served again once the NodePort is gone, as before the restart.
func (r *Registry) Restore(e Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.overlap(e); err != nil {
		return err
	}
	r.put(e)
	return nil
}

func (r *Registry) overlap(e Entry) error {
	for _, m := range e.Mappings {
		for _, o := range r.sorted() {
			if o.Sandbox == e.Sandbox {
				continue
			}
			for _, om := range o.Mappings {
				if m.overlaps(om) {
					return types.NewError(ErrConflict,
						fmt.Sprintf("hostPort %s of Pod %s conflicts with %s of %s on this node", m, e.Pod, om, Describe("Pod", o.Pod, namespace(e.Pod))), "")
				}
			}
		}
	}
	return nil
}

func (r *Registry) put(e Entry) {
	if len(e.Mappings) == 0 {
		delete(r.bySandbox, e.Sandbox)
	} else {
		e.Mappings = slices.Clone(e.Mappings)
		r.bySandbox[e.Sandbox] = e
	}
	r.notify()
}

// SetServiceNodePorts records the NodePorts of a Service ("namespace/name"; none: the Service is
// gone or has none) and reports whether that changed which Service holds the port of a claimed
// mapping: the caller then serves, or stops serving, that mapping before it serves the Service's
// NodePorts (two sets of flows for one port would collide).
func (r *Registry) SetServiceNodePorts(service string, ports []Port) (claimedChanged bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setServiceNodePorts(service, ports)
}

// ReplaceNodePorts records the NodePorts of every Service, forgetting the Services not in byService
// (the full pass, which serves the mappings as HeldBy says next).
func (r *Registry) ReplaceNodePorts(byService map[string][]Port) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for svc := range r.byService {
		if _, ok := byService[svc]; !ok {
			r.setServiceNodePorts(svc, nil)
		}
	}
	for svc, ports := range byService {
		r.setServiceNodePorts(svc, ports)
	}
}

// setServiceNodePorts records the Service's NodePorts and reports whether a claimed mapping's
// port changed holders.
func (r *Registry) setServiceNodePorts(service string, ports []Port) bool {
	old := r.byService[service]
	ports = slices.Compact(slices.SortedFunc(slices.Values(ports), comparePorts))
	if slices.Equal(old, ports) {
		return false
	}
	claimedChanged := false
	for _, p := range old {
		if !slices.Contains(ports, p) {
			r.nodePorts[p] = slices.DeleteFunc(r.nodePorts[p], func(s string) bool { return s == service })
			if len(r.nodePorts[p]) == 0 {
				delete(r.nodePorts, p)
			}
			claimedChanged = claimedChanged || r.claimed(p)
		}
	}
	for _, p := range ports {
		if !slices.Contains(old, p) {
			r.nodePorts[p] = append(r.nodePorts[p], service)
			slices.Sort(r.nodePorts[p])
			claimedChanged = claimedChanged || r.claimed(p)
		}
	}
	if len(ports) == 0 {
		delete(r.byService, service)
	} else {
		r.byService[service] = ports
	}
	return claimedChanged
}

func (r *Registry) claimed(p Port) bool {
	for _, e := range r.bySandbox {
		for _, m := range e.Mappings {
			if m.Protocol == p.Protocol && m.HostPort == p.Port {
				return true
			}
		}
	}
	return false
}

// HeldBy returns the Services ("namespace/name", sorted) whose NodePort is on the mapping's port
// and protocol: the mapping is not served while there is one.
func (r *Registry) HeldBy(m Mapping) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.nodePorts[Port{m.Protocol, m.HostPort}])
}

func comparePorts(a, b Port) int {
	return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
}

// Release forgets the sandbox's claims; an unknown sandbox is a no-op.
func (r *Registry) Release(sandbox string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.bySandbox[sandbox]; ok {
		delete(r.bySandbox, sandbox)
		r.notify()
	}
}

// List returns the claims of attached sandboxes (those with an address), by sandbox ID.
func (r *Registry) List() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Entry
	for _, e := range r.sorted() {
		if e.IP.IsValid() {
			e.Mappings = slices.Clone(e.Mappings)
			out = append(out, e)
		}
	}
	return out
}

func (r *Registry) sorted() []Entry {
	out := make([]Entry, 0, len(r.bySandbox))
	for _, e := range r.bySandbox {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Sandbox, b.Sandbox) })
	return out
}

// Subscribe returns a channel that receives a value (coalesced) after every change of the claims.
func (r *Registry) Subscribe() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(chan struct{}, 1)
	r.subs = append(r.subs, c)
	return c
}

func (r *Registry) notify() {
	for _, c := range r.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}
