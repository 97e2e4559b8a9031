package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// Node is what Assign needs to know of a winnet node (a node with a WindowsNodeNetwork).
type Node struct {
	Name   string
	Labels labels.Set
	// Ready: the Node is Ready and its agent reports its WindowsNodeNetwork Ready.
	Ready bool
	// Subnet is the node IP with the prefix length of its uplink subnet, as the agent reports it
	// (WindowsNodeNetwork status.nodeSubnet); invalid while not reported.
	Subnet netip.Prefix
	// NoEncap: the node routes to its peers without a tunnel, so the Pods of other nodes could not
	// be carried to it; it holds no egress IP.
	NoEncap bool
	// LeaseExpired: winnet-controller has not seen the node's agent renew its Egress Lease within
	// the Lease's duration (or the node has none): its agent may be cut off or gone, and it holds no
	// egress IP.
	LeaseExpired bool
}

// Cluster is what Assign needs to know of the cluster besides the Egresses.
type Cluster struct {
	// Nodes are the winnet nodes.
	Nodes []Node
	// NodeAddresses are the addresses of every node, winnet's or not (Node status.addresses and
	// the WindowsNodeNetworks' node IPs): no egress IP may be one of them.
	NodeAddresses map[netip.Addr]string
	// Reserved are the cluster's Pod CIDRs and Service CIDRs: no egress IP may lie in them.
	Reserved []netip.Prefix
}

// Decision is where an Egress's IP goes, or why it goes nowhere.
type Decision struct {
	// Node holds the egress IP; empty when Assigned is False, except while Releasing.
	Node string
	// Releasing: the IP is moving away from Node, which has not surely given it up yet (see
	// docs/egress.md, fencing); no node holds it meanwhile.
	Releasing bool
	// Reason and Message are those of the Assigned condition.
	Reason, Message string
}

// Assigned reports whether a node holds the egress IP.
func (d Decision) Assigned() bool { return d.Node != "" && !d.Releasing }

// Assign places each Egress's IP on one eligible node: a Ready winnet node, not in NoEncap mode, whose
// uplink subnet holds the IP and that the Egress's nodeSelector selects. It keeps an Egress on the
// node that holds it while that node stays eligible (status.node: no move without a reason), and
// places the others, oldest first, on the eligible node holding the fewest egress IPs (then by
// name), so that Egresses spread over the nodes. An IP that is a node's address, lies in a Pod or
// Service CIDR, or is an older Egress's IP (creationTimestamp, then name) is refused with
// IPConflictReason.
//
// It is a pure function of its arguments: the same input gives the same decisions.
func Assign(egresses []Compiled, c Cluster) map[string]Decision {
	ordered := slices.Clone(egresses)
	slices.SortFunc(ordered, func(a, b Compiled) int {
		if Older(a.Egress, b.Egress) {
			return -1
		}
		if Older(b.Egress, a.Egress) {
			return 1
		}
		return 0
	})
	nodes := make(map[string]Node, len(c.Nodes))
	for _, n := range c.Nodes {
		nodes[n.Name] = n
	}
	out := make(map[string]Decision, len(ordered))
	owner := map[netip.Addr]string{}
	// The first pass refuses conflicts and keeps what stays eligible where it is.
	var toPlace []Compiled
	load := map[string]int{}
	for _, e := range ordered {
		name := e.Egress.Name
		ip, err := netip.ParseAddr(string(e.Egress.Spec.EgressIP))
		if err != nil || !ip.Is4() {
			out[name] = Decision{Reason: networkv1alpha1.InvalidSpecReason, Message: fmt.Sprintf("egressIP %q is not an IPv4 address", e.Egress.Spec.EgressIP)}
			continue
		}
		if msg := conflict(ip, c, owner); msg != "" {
			out[name] = Decision{Reason: networkv1alpha1.IPConflictReason, Message: msg}
			continue
		}
		owner[ip] = name
		if cur, ok := nodes[e.Egress.Status.Node]; ok && eligible(e, ip, cur) == "" {
			out[name] = Decision{Node: cur.Name}
			load[cur.Name]++
			continue
		}
		toPlace = append(toPlace, e)
	}
	for _, e := range toPlace {
		ip := netip.MustParseAddr(string(e.Egress.Spec.EgressIP))
		var best string
		why := map[string][]string{}
		for _, n := range c.Nodes {
			if reason := eligible(e, ip, n); reason != "" {
				why[reason] = append(why[reason], n.Name)
				continue
			}
			if best == "" || load[n.Name] < load[best] || (load[n.Name] == load[best] && n.Name < best) {
				best = n.Name
			}
		}
		if best == "" {
			out[e.Egress.Name] = noNode(ip, why, len(c.Nodes))
			continue
		}
		load[best]++
		out[e.Egress.Name] = Decision{Node: best}
	}
	for name, d := range out {
		if d.Assigned() {
			d.Reason, d.Message = networkv1alpha1.EgressAssignedReason, fmt.Sprintf("Node %s holds the egress IP", d.Node)
			out[name] = d
		}
	}
	return out
}

// conflict says why ip may not be an egress IP, or "" when it may.
func conflict(ip netip.Addr, c Cluster, owner map[netip.Addr]string) string {
	if node, ok := c.NodeAddresses[ip]; ok {
		return fmt.Sprintf("egressIP %s is an address of node %s: choose an unused address of the uplink subnet", ip, node)
	}
	for _, p := range c.Reserved {
		if p.Contains(ip) {
			return fmt.Sprintf("egressIP %s lies in the cluster's Pod or Service CIDR %s: choose an unused address of the uplink subnet", ip, p)
		}
	}
	if other, ok := owner[ip]; ok {
		return fmt.Sprintf("egressIP %s is the egressIP of Egress %s, which is older and keeps it", ip, other)
	}
	return ""
}

// The reasons a node is not eligible, as eligible returns them.
const (
	notReady      = "not Ready"
	noSubnet      = "not reporting its uplink subnet"
	otherSubnet   = "on another uplink subnet"
	notSelected   = "not selected by nodeSelector"
	inNoEncapMode = "in NoEncap mode"
	leaseExpired  = "without a renewed Egress Lease"
)

// MayHold reports whether node n may hold the Egress's ip, by Assign's test (an agent asks it of its
// own node, as Ready and with its Lease renewed, to know whether to renew its Lease at all).
func MayHold(e Compiled, ip netip.Addr, n Node) bool { return eligible(e, ip, n) == "" }

// eligible returns why node n may not hold the Egress's ip, or "" when it may.
func eligible(e Compiled, ip netip.Addr, n Node) string {
	switch {
	case !n.Ready:
		return notReady
	case n.LeaseExpired:
		return leaseExpired
	case !n.Subnet.IsValid():
		return noSubnet
	case !n.Subnet.Masked().Contains(ip):
		return otherSubnet
	case e.Nodes != nil && !e.Nodes.Matches(n.Labels):
		return notSelected
	case n.NoEncap:
		return inNoEncapMode
	}
	return ""
}

// noNode is the decision for an Egress no node may hold: NoEncap when the only nodes that would
// otherwise do are in NoEncap mode, NoEligibleNode otherwise, the message counting the nodes that
// fail each test.
func noNode(ip netip.Addr, why map[string][]string, total int) Decision {
	if total == 0 {
		return Decision{Reason: networkv1alpha1.NoEligibleNodeReason, Message: fmt.Sprintf("no winnet node can hold egressIP %s: the cluster has none", ip)}
	}
	if len(why) == 1 && len(why[inNoEncapMode]) > 0 {
		return Decision{Reason: networkv1alpha1.NoEncapRefusedReason, Message: fmt.Sprintf(
			"the nodes that could hold egressIP %s (%s) are in NoEncap mode: Pods of other nodes cannot be carried to them; use Encap or Hybrid mode",
			ip, names(why[inNoEncapMode]))}
	}
	var parts []string
	for _, reason := range []string{notReady, leaseExpired, noSubnet, otherSubnet, notSelected, inNoEncapMode} {
		if n := why[reason]; len(n) > 0 {
			parts = append(parts, fmt.Sprintf("%d %s (%s)", len(n), reason, names(n)))
		}
	}
	return Decision{Reason: networkv1alpha1.NoEligibleNodeReason, Message: fmt.Sprintf("no winnet node can hold egressIP %s: %s", ip, strings.Join(parts, "; "))}
}

// names lists at most five node names.
func names(n []string) string {
	if len(n) > 5 {
		return strings.Join(n[:5], ", ") + fmt.Sprintf(" and %d more", len(n)-5)
	}
	return strings.Join(n, ", ")
}
