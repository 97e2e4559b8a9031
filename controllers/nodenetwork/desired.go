package nodenetwork

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Requested OpenFlow port numbers of the node's fixed ports, as Antrea uses on Windows. OVS assigns
// Pod ports from 1 upward, so these never collide with them.
const (
	TunnelOFPort  int32 = 32768
	GatewayOFPort int32 = 32769
	UplinkOFPort  int32 = 32770
)

// UplinkKey is the bridge external_id naming the uplink: once HNS has moved the host's address to
// the management vNIC, the uplink no longer holds the node IP and is found through it (also by
// `winnet-agent reset`, offline).
const UplinkKey = "winnet-uplink"

// Tunnel overheads subtracted from the uplink MTU.
const (
	vxlanOverhead  = 50
	geneveOverhead = 58
)

// facts are what the agent observed on the host that the desired state depends on.
type facts struct {
	// uplinkName, uplinkMAC and uplinkMTU describe the uplink adapter.
	uplinkName string
	uplinkMAC  net.HardwareAddr
	uplinkMTU  int
	// nodePodCIDRs are the Node's spec.podCIDRs; empty when the Node is unknown.
	nodePodCIDRs []string
}

// desired is the node network a WindowsNodeNetwork asks for, on this host.
type desired struct {
	nodeIP      netip.Addr
	podCIDR     netip.Prefix
	gateway     netip.Prefix // the gateway IP with the Pod CIDR's length
	mtu         int
	hnsNetwork  hns.NetworkSpec
	bridge      ovsdb.BridgeSpec
	uplink      ovsdb.PortSpec
	gatewayPort ovsdb.PortSpec
	// tunnel is nil in NoEncap mode.
	tunnel *ovsdb.PortSpec
	vni    uint32
	// tunnelUDPPort is the tunnel's UDP destination port.
	tunnelUDPPort uint16
	// admitAny turns tunnel admission off (spec.encapsulation.tunnelAdmission Off).
	admitAny bool
	// vtepMAC is the node's VTEP MAC (vtep.MAC); set by the reconciler, which knows the node's name.
	vtepMAC net.HardwareAddr
	snat    bool
	noSNAT  []netip.Prefix
}

// invalidSpecError is a spec that cannot be realised on this host; the agent reports it and waits
// for a corrected spec instead of retrying.
type invalidSpecError struct{ msg string }

func (e *invalidSpecError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &invalidSpecError{msg: fmt.Sprintf(format, args...)}
}

// desiredState computes the node network from the spec and the observed facts. It is pure.
func desiredState(spec networkv1alpha1.WindowsNodeNetworkSpec, f facts) (desired, error) {
	var d desired
	if spec.NodeIP == "" {
		return d, invalid("spec.nodeIP is empty: winnet-controller fills it from the Node's InternalIP, or set it")
	}
	var err error
	if d.nodeIP, err = netip.ParseAddr(string(spec.NodeIP)); err != nil {
		return d, invalid("spec.nodeIP %q: %v", spec.NodeIP, err)
	}
	for _, c := range spec.PodCIDRs {
		p, err := netip.ParsePrefix(string(c))
		if err != nil {
			return d, invalid("spec.podCIDRs: %v", err)
		}
		if p.Addr().Is4() {
			d.podCIDR = p
		}
	}
	if !d.podCIDR.IsValid() {
		return d, invalid("spec.podCIDRs has no IPv4 CIDR")
	}
	if len(f.nodePodCIDRs) > 0 && !contains(f.nodePodCIDRs, d.podCIDR.String()) {
		return d, invalid("spec.podCIDRs %v does not match the Node's Pod CIDRs %v: the node's Pods would get addresses the cluster routes elsewhere", spec.PodCIDRs, f.nodePodCIDRs)
	}
	gw := d.podCIDR.Addr().Next()
	if spec.Gateway.IP != "" {
		if gw, err = netip.ParseAddr(string(spec.Gateway.IP)); err != nil {
			return d, invalid("spec.gateway.ip %q: %v", spec.Gateway.IP, err)
		}
	}
	d.gateway = netip.PrefixFrom(gw, d.podCIDR.Bits())

	enc := spec.Encapsulation
	d.mtu = int(enc.MTU)
	if d.mtu == 0 {
		d.mtu = f.uplinkMTU
		if enc.Mode != networkv1alpha1.EncapsulationModeNoEncap {
			d.mtu -= overhead(enc.TunnelType)
		}
	}

	d.hnsNetwork = hns.NetworkSpec{
		Name: spec.HNSNetwork.Name, AdapterName: f.uplinkName, Subnet: d.podCIDR, Gateway: gw, SourceMAC: f.uplinkMAC,
	}
	d.bridge = ovsdb.BridgeSpec{
		Name: string(spec.Bridge.Name), DatapathType: string(spec.Bridge.DatapathType), HWAddr: f.uplinkMAC,
		ExternalIDs: map[string]string{UplinkKey: f.uplinkName},
		FlowLimits:  map[int]int{int(pipeline.TunnelSourceSeenTable): pipeline.TunnelSeenLimit},
	}
	d.uplink = ovsdb.PortSpec{Name: f.uplinkName, Type: ovsdb.PortTypeSystem, OFPortRequest: UplinkOFPort}
	d.gatewayPort = ovsdb.PortSpec{Name: string(spec.Gateway.Name), Type: ovsdb.PortTypeInternal, OFPortRequest: GatewayOFPort}
	if enc.Mode != networkv1alpha1.EncapsulationModeNoEncap {
		typ := ovsdb.PortTypeVXLAN
		if enc.TunnelType == networkv1alpha1.TunnelTypeGeneve {
			typ = ovsdb.PortTypeGeneve
		}
		t := ovsdb.TunnelPort(networkv1alpha1.DefaultTunnelPortName, typ, TunnelOFPort, ovsdb.TunnelOptions{
			LocalIP: d.nodeIP.String(), DstPort: tunnelPort(enc),
		})
		d.tunnel = &t
		d.tunnelUDPPort = uint16(tunnelPort(enc))
	}
	d.vni = uint32(enc.VNI)
	d.admitAny = enc.TunnelAdmission == networkv1alpha1.TunnelAdmissionOff

	d.snat = spec.SNAT.Enabled == nil || *spec.SNAT.Enabled
	for _, list := range [][]networkv1alpha1.CIDR{spec.ClusterCIDRs, spec.ServiceCIDRs, spec.SNAT.ExcludeCIDRs} {
		for _, c := range list {
			if p, err := netip.ParsePrefix(string(c)); err == nil {
				d.noSNAT = append(d.noSNAT, p)
			}
		}
	}
	d.noSNAT = append(d.noSNAT, netip.PrefixFrom(d.nodeIP, d.nodeIP.BitLen()))
	return d, nil
}

// serviceCIDRs returns the IPv4 prefixes of cidrs, masked, sorted and each once (the API server
// validated them; an unparsable one is skipped).
func serviceCIDRs(cidrs []networkv1alpha1.CIDR) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(string(c)); err == nil && p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return slices.Compact(out)
}

func overhead(t networkv1alpha1.TunnelType) int {
	if t == networkv1alpha1.TunnelTypeGeneve {
		return geneveOverhead
	}
	return vxlanOverhead
}

func tunnelPort(enc networkv1alpha1.EncapsulationSpec) int {
	switch {
	case enc.Port != 0:
		return int(enc.Port)
	case enc.TunnelType == networkv1alpha1.TunnelTypeGeneve:
		return networkv1alpha1.DefaultGenevePort
	default:
		return networkv1alpha1.DefaultVXLANPort
	}
}

// pipelineNode is the base pipeline's model once the ports are realised.
func (d desired) pipelineNode(gatewayMAC net.HardwareAddr, ofports map[string]int32) pipeline.Node {
	n := pipeline.Node{
		NodeIP: d.nodeIP, PodCIDR: d.podCIDR, GatewayIP: d.gateway.Addr(), GatewayMAC: gatewayMAC,
		GatewayOFPort: uint32(ofports[d.gatewayPort.Name]), UplinkOFPort: uint32(ofports[d.uplink.Name]),
		SNAT: d.snat, NoSNAT: d.noSNAT,
	}
	if d.tunnel != nil {
		n.TunnelOFPort = uint32(ofports[d.tunnel.Name])
		n.VNI, n.VTEPMAC, n.AdmitAnyTunnelSource, n.TunnelUDPPort = d.vni, d.vtepMAC, d.admitAny, d.tunnelUDPPort
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readyMessage is the PipelineReady condition's message of a node network with total flows installed (the
// Ready condition names the IPv6 Pod CIDRs the node does not realise: setReadyCondition).
func (d desired) readyMessage(total int) string {
	snat := "off"
	if d.snat {
		snat = "to " + d.nodeIP.String()
	}
	return fmt.Sprintf("%d flows installed; SNAT %s", total, snat)
}
