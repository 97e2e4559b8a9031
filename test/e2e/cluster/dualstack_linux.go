//go:build linux

package cluster

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The IPv6 side of a dual-stack cluster (Options.DualStack), IPv4 first as kubeadm lists the families: the
// API server allocates a second ClusterIP from ServiceCIDRv6 to the Services that ask for one, every Node has
// an IPv6 Pod CIDR and an IPv6 InternalIP beside its IPv4 ones, and every host on the underlay an IPv6
// address. The IPv6 addresses mirror the IPv4 ones digit for digit, so that a log reads at a glance: the
// underlay 192.168.79.0/24 is fd00:192:168:79::/64 with the host .11 at fd00:192:168:79::11; the cluster
// CIDR 10.246.0.0/16 is fd00:10:246::/48 with the node Pod CIDR 10.246.1.0/24 at fd00:10:246:1::/64.
var ServiceCIDRv6 = netip.MustParsePrefix("fd00:10:96::/112")

// mirrorV6 is the IPv6 address fd00:<octets, each written in decimal as one group>, with the remaining
// groups zero; bits is the IPv6 prefix length.
func mirrorV6(bits int, octets ...byte) netip.Prefix {
	groups := []string{"fd00"}
	for _, o := range octets {
		groups = append(groups, fmt.Sprint(o))
	}
	s := strings.Join(groups, ":")
	if len(groups) < 8 {
		s += "::"
	}
	return netip.PrefixFrom(netip.MustParseAddr(s), bits).Masked()
}

// checkDualStack fails unless the cluster's IPv4 plan has the shape the IPv6 mirror needs: a /24 underlay
// and a /16 cluster CIDR.
func checkDualStack(opts Options) error {
	if opts.UnderlayCIDR.Bits() != 24 || opts.ClusterCIDR.Bits() != 16 {
		return fmt.Errorf("a dual-stack cluster needs a /24 underlay and a /16 cluster CIDR (the IPv6 plan mirrors them), got %s and %s",
			opts.UnderlayCIDR, opts.ClusterCIDR)
	}
	return nil
}

// DualStack reports whether the cluster is dual-stack (Options.DualStack).
func (c *Cluster) DualStack() bool { return c.opts.DualStack }

// underlayV6 is the IPv6 address of the underlay host whose IPv4 address is ip; the zero Addr in a
// single-stack cluster.
func (c *Cluster) underlayV6(ip netip.Addr) netip.Addr {
	if !c.opts.DualStack {
		return netip.Addr{}
	}
	b := ip.As4()
	p := mirrorV6(64, b[0], b[1], b[2])
	return netip.MustParseAddr(strings.TrimSuffix(p.Addr().String(), "::") + "::" + fmt.Sprint(b[3]))
}

// podCIDRv6 is the IPv6 Pod CIDR of the node whose IPv4 Pod CIDR is p (a /24); the zero Prefix in a
// single-stack cluster.
func (c *Cluster) podCIDRv6(p netip.Prefix) netip.Prefix {
	if !c.opts.DualStack {
		return netip.Prefix{}
	}
	b := p.Addr().As4()
	return mirrorV6(64, b[0], b[1], b[2])
}

// checkPodCIDR fails when a node's Pod CIDR has no IPv6 mirror in a dual-stack cluster.
func (c *Cluster) checkPodCIDR(p netip.Prefix) error {
	if c.opts.DualStack && p.Bits() != 24 {
		return fmt.Errorf("a node of a dual-stack cluster needs a /24 Pod CIDR (its IPv6 one mirrors it), got %s", p)
	}
	return nil
}

// addUnderlayV6 gives the interface ifName in namespace ns the IPv6 address mirroring ip, without duplicate
// address detection (the address is usable at once, as a configured static one); nothing in a single-stack
// cluster.
func (c *Cluster) addUnderlayV6(ns, ifName string, ip netip.Addr) error {
	if !c.opts.DualStack {
		return nil
	}
	return run(ns, []string{"ip", "-6", "addr", "add", netip.PrefixFrom(c.underlayV6(ip), 64).String(), "dev", ifName, "nodad"})
}

// serviceCIDRs is the API server's and kube-controller-manager's --service-cluster-ip-range.
func (c *Cluster) serviceCIDRs() string {
	if c.opts.DualStack {
		return ServiceCIDR.String() + "," + ServiceCIDRv6.String()
	}
	return ServiceCIDR.String()
}

// clusterCIDRs is kube-controller-manager's --cluster-cidr and winnet-controller's --cluster-cidrs.
func (c *Cluster) clusterCIDRs() string {
	if c.opts.DualStack {
		return c.ClusterCIDR.String() + "," + c.ClusterCIDRv6.String()
	}
	return c.ClusterCIDR.String()
}

// podCIDRs are a Node's spec.podCIDRs: the IPv4 one, and the IPv6 one when v6 is valid.
func podCIDRs(v4, v6 netip.Prefix) []string {
	if v6.IsValid() {
		return []string{v4.String(), v6.String()}
	}
	return []string{v4.String()}
}

// nodeAddresses are a Node's status addresses as kubelet writes them: its InternalIPs, IPv4 first (and IPv6
// when v6 is valid, first when v6First), and its host name.
func nodeAddresses(name string, v4, v6 netip.Addr, v6First bool) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, ip := range orderedIPs(v4, v6, v6First) {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
}

// nodeIPs is kubelet's --node-ip: the IPv4 address, and the IPv6 one when v6 is valid (first when v6First).
func nodeIPs(v4, v6 netip.Addr, v6First bool) string {
	return strings.Join(orderedIPs(v4, v6, v6First), ",")
}

func orderedIPs(v4, v6 netip.Addr, v6First bool) []string {
	switch {
	case !v6.IsValid():
		return []string{v4.String()}
	case v6First:
		return []string{v6.String(), v4.String()}
	default:
		return []string{v4.String(), v6.String()}
	}
}
