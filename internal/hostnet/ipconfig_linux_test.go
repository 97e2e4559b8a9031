package hostnet

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestReadAndApplyIPConfig(t *testing.T) {
	g, h, up, br, _ := moveSetup(t)
	ctx := t.Context()

	cfg, err := h.ReadIPConfig(ctx, up)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Addresses).To(ConsistOf(netip.MustParsePrefix("10.80.0.5/24"), netip.MustParsePrefix("10.80.0.6/24"), netip.MustParsePrefix("fd00:80::5/64")),
		"the movable addresses, no link-local one")
	g.Expect(cfg.Routes).To(HaveLen(5))
	g.Expect(cfg.DHCP).To(BeFalse(), "static addresses live forever")
	g.Expect(cfg.DNSServers).To(BeEmpty())

	// Applied to another link, the configuration is there, routes through that link.
	g.Expect(h.ApplyIPConfig(ctx, br, cfg)).To(Succeed())
	got, err := h.ReadIPConfig(ctx, br)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Addresses).To(ConsistOf(cfg.Addresses))
	want := make([]Route, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		r.LinkIndex = br
		want = append(want, r)
	}
	g.Expect(got.Routes).To(ConsistOf(want))
	g.Expect(got.DHCP).To(BeFalse())
	settle(g)
	g.Expect(netlinkEvents(g, func() { g.Expect(h.ApplyIPConfig(ctx, br, cfg)).To(Succeed()) })).To(BeEmpty(), "applying again changes nothing")
}

func TestIPConfigDHCPStaysDHCP(t *testing.T) {
	g, h, _, br, other := moveSetup(t)
	ctx := t.Context()
	link, err := netlink.LinkByIndex(other)
	g.Expect(err).NotTo(HaveOccurred())
	lease, err := netlink.ParseAddr("10.95.0.7/24")
	g.Expect(err).NotTo(HaveOccurred())
	lease.ValidLft, lease.PreferedLft = 3600, 3600
	g.Expect(netlink.AddrAdd(link, lease)).To(Succeed())

	cfg, err := h.ReadIPConfig(ctx, other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.DHCP).To(BeTrue(), "an address with a finite lifetime is a DHCP lease")
	g.Expect(h.ApplyIPConfig(ctx, br, cfg)).To(Succeed())
	brLink, err := netlink.LinkByIndex(br)
	g.Expect(err).NotTo(HaveOccurred())
	addrs, err := netlink.AddrList(brLink, unix.AF_INET)
	g.Expect(err).NotTo(HaveOccurred())
	leased := 0
	for _, a := range addrs {
		g.Expect(a.ValidLft).NotTo(Equal(foreverLifetime), "%s is a lease on the target too", a.IPNet)
		leased++
	}
	g.Expect(leased).To(Equal(2))
	back, err := h.ReadIPConfig(ctx, br)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.DHCP).To(BeTrue())
}

func TestRenameLinkKeepsAddressesAndRoutes(t *testing.T) {
	g, h, up, _, _ := moveSetup(t)
	ctx := t.Context()
	before, err := h.ReadIPConfig(ctx, up)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(h.RenameLink(ctx, up, "vnic-renamed")).To(Succeed())
	l, err := h.LinkByName(ctx, "vnic-renamed")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Index).To(Equal(up), "the same interface, renamed")
	g.Expect(l.Up).To(BeTrue())
	after, err := h.ReadIPConfig(ctx, up)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Addresses).To(ConsistOf(before.Addresses))
	g.Expect(after.Routes).To(ConsistOf(before.Routes), "going down for the rename dropped the routes; they are back")
	g.Expect(h.RenameLink(ctx, up, "vnic-renamed")).To(Succeed(), "renaming to the current name is a no-op")
}
