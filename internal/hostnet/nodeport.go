package hostnet

import (
	"context"
	"net/netip"
)

// NodePortNATName is the name of what NATs the host's own connections to its NodePorts: on
// Windows the NetNat (MSFT_NetNat) whose static mappings they are, on Linux the nftables table of
// the output DNAT rules. Nothing else carries it: it is winnet's ownership mark.
const NodePortNATName = "winnet-nodeport"

// NodePort is one NodePort of the node: its protocol ("TCP" or "UDP") and port.
type NodePort struct {
	Protocol string
	Port     uint16
}

// NodePortNAT sends the host's own connections to its NodePorts into the switch. A host process
// connecting to one of the node's addresses never leaves the host's stack, so the switch would
// never see it: the host NATs it to a virtual address routed through the gateway (same port),
// where the switch balances it over the port's endpoints. On Windows this is one NetNat over the
// virtual address and one static mapping (0.0.0.0:port -> virtual address:port) per NodePort and
// protocol, through WMI (iphlpapi has no NAT call); on Linux an nftables output DNAT rule per
// NodePort and protocol, for every local destination but loopback.
type NodePortNAT interface {
	// ReconcileNodePorts makes the host NAT its own connections to exactly these ports to target:
	// mappings missing are added, those of other ports (or another target) removed. No port
	// removes everything, the NAT itself included (reset and uninstall). Only what carries
	// NodePortNATName is touched.
	ReconcileNodePorts(ctx context.Context, target netip.Addr, ports []NodePort) error
}
