package hostnet

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
)

// The reading side of the iphlpapi adapter, checked against Go's own reading of the same adapters
// (net.Interfaces, which parses GetAdaptersAddresses itself). make test-windows runs it under Wine,
// whose iphlpapi reports the Linux host's interfaces, addresses and routes; the writing side
// (addresses, routes, MTU, forwarding) needs a Windows node: Wine does not implement those writes.

// goView is one interface as Go's net package reads it.
type goView struct {
	iface net.Interface
	addrs []netip.Prefix
}

func goInterfaces(t *testing.T) []goView {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatalf("net.Interfaces: %v", err)
	}
	var out []goView
	for _, i := range ifs {
		as, err := i.Addrs()
		if err != nil {
			t.Fatalf("addresses of %s: %v", i.Name, err)
		}
		v := goView{iface: i}
		for _, a := range as {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(ipn.IP)
			ones, _ := ipn.Mask.Size()
			v.addrs = append(v.addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		t.Fatal("net.Interfaces found no interface")
	}
	return out
}

// TestLinksAndAddressesAsWindowsReportsThem: every interface Go sees is found by name and by each
// of its addresses, with the same index, MAC, MTU and state, and the same addresses.
func TestLinksAndAddressesAsWindowsReportsThem(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, err := New(Options{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, v := range goInterfaces(t) {
		t.Logf("%d %q %s mtu %d %v %v", v.iface.Index, v.iface.Name, v.iface.HardwareAddr, v.iface.MTU, v.iface.Flags, v.addrs)
		l, err := h.LinkByName(ctx, v.iface.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Index).To(Equal(v.iface.Index), v.iface.Name)
		g.Expect(l.MAC.String()).To(Equal(v.iface.HardwareAddr.String()), v.iface.Name)
		g.Expect(l.MTU).To(Equal(v.iface.MTU), v.iface.Name)
		g.Expect(l.Up).To(Equal(v.iface.Flags&net.FlagRunning != 0), v.iface.Name)

		addrs, err := h.Addresses(ctx, l.Index)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(addrs).To(ConsistOf(v.addrs), v.iface.Name)
		for _, a := range v.addrs {
			byAddr, err := h.LinkByAddress(ctx, a.Addr())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(byAddr.Index).To(Equal(l.Index), "the link holding %s", a)
		}
	}
	_, err = h.LinkByName(ctx, "winnet-no-such-adapter")
	g.Expect(err).To(MatchError(ErrNotFound))
	_, err = h.LinkByAddress(ctx, netip.MustParseAddr("203.0.113.254"))
	g.Expect(err).To(MatchError(ErrNotFound))
}

// TestRoutesAndIPConfigAsWindowsReportsThem: every route read goes through an interface that
// exists, by a gateway on one of its subnets; an adapter's IP configuration (what HNS moves to the
// management vNIC) is its addresses but the link-local ones, and its routes are the adapter's.
func TestRoutesAndIPConfigAsWindowsReportsThem(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, err := New(Options{})
	g.Expect(err).NotTo(HaveOccurred())
	views := goInterfaces(t)
	byIndex := map[int]goView{}
	for _, v := range views {
		byIndex[v.iface.Index] = v
	}
	all, err := h.Routes(ctx, RouteFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("routes: %v", all)
	for _, r := range all {
		v, ok := byIndex[r.LinkIndex]
		g.Expect(ok).To(BeTrue(), "route %v goes through no interface Go sees", r)
		g.Expect(r.Owned).To(BeFalse(), "this machine has no route of winnet's: %v", r)
		if r.Gateway.IsValid() {
			g.Expect(slices.ContainsFunc(v.addrs, func(p netip.Prefix) bool { return p.Masked().Contains(r.Gateway) })).
				To(BeTrue(), "route %v: its gateway is on none of %s's subnets %v", r, v.iface.Name, v.addrs)
		}
	}
	owned, err := h.Routes(ctx, RouteFilter{OwnedOnly: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(owned).To(BeEmpty())

	for _, v := range views {
		cfg, err := h.ReadIPConfig(ctx, v.iface.Index)
		g.Expect(err).NotTo(HaveOccurred())
		var want []netip.Prefix
		for _, a := range v.addrs {
			if !a.Addr().IsLinkLocalUnicast() {
				want = append(want, a)
			}
		}
		g.Expect(cfg.Addresses).To(ConsistOf(want), v.iface.Name)
		routes, err := h.Routes(ctx, RouteFilter{LinkIndex: v.iface.Index})
		g.Expect(err).NotTo(HaveOccurred())
		for _, r := range cfg.Routes {
			g.Expect(r.LinkIndex).To(Equal(v.iface.Index))
			g.Expect(routes).To(ContainElement(r), "%s's configuration holds a route of the adapter", v.iface.Name)
		}
	}
}
