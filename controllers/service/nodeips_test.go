package service

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/pipeline"
)

func TestNodeIPs(t *testing.T) {
	node := pipeline.Node{NodeIP: netip.MustParseAddr("192.168.1.10"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24"),
		GatewayIP: netip.MustParseAddr("10.244.1.1")}
	prefixes := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		bridge []netip.Prefix
		want   []netip.Addr
	}{
		{name: "no addresses read: the node IP", want: addrs("192.168.1.10")},
		{name: "the node IP only", bridge: prefixes("192.168.1.10/24"), want: addrs("192.168.1.10")},
		{name: "a second address and another subnet", bridge: prefixes("10.0.0.5/8", "192.168.1.10/24", "192.168.1.21/24"),
			want: addrs("192.168.1.10", "10.0.0.5", "192.168.1.21")},
		{name: "link-local, IPv6, the gateway's and Pod-subnet addresses are left out",
			bridge: prefixes("10.244.1.1/24", "10.244.1.7/24", "169.254.3.4/16", "192.168.1.10/24", "fd00::5/64", "fe80::1/64", "::ffff:192.168.1.22/120"),
			want:   addrs("192.168.1.10", "192.168.1.22")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(nodeIPs(nodenetwork.Realized{Node: node, BridgeAddresses: tc.bridge})).To(Equal(tc.want))
		})
	}
}
