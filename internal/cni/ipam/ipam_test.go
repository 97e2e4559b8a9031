package ipam

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/wine"
)

func newTestIPAM(t *testing.T) *HostLocal {
	t.Helper()
	ipam, err := New(Options{DataDir: wine.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	return ipam
}

func TestIPAMAllocatesAsHostLocal(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ipam := newTestIPAM(t)
	subnet := netip.MustParsePrefix("10.244.7.0/29")
	req := func(id string) Request { return Request{ContainerID: id, IfName: "eth0", Subnet: subnet} }

	// The /29 has 5 addresses to give, in order: never the gateway (.1), the network or the
	// broadcast address.
	var got []netip.Prefix
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		p, err := ipam.Allocate(ctx, req(id))
		g.Expect(err).NotTo(HaveOccurred())
		got = append(got, p)
	}
	g.Expect(got).To(Equal([]netip.Prefix{
		netip.MustParsePrefix("10.244.7.2/29"), netip.MustParsePrefix("10.244.7.3/29"), netip.MustParsePrefix("10.244.7.4/29"),
		netip.MustParsePrefix("10.244.7.5/29"), netip.MustParsePrefix("10.244.7.6/29")}))

	// host-local's files: one per address holding the container ID and interface, the last one
	// reserved, the lock.
	dir := filepath.Join(ipam.dataDir, ipamNetwork)
	b, err := os.ReadFile(filepath.Join(dir, "10.244.7.2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("a\r\neth0"))
	b, err = os.ReadFile(filepath.Join(dir, "last_reserved_ip.0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal("10.244.7.6"))
	g.Expect(filepath.Join(dir, "lock")).To(BeAnExistingFile())

	// Exhausted: the error, with a CNI code, says so and what was asked.
	_, err = ipam.Allocate(ctx, req("f"))
	var cniErr *types.Error
	g.Expect(err).To(BeAssignableToTypeOf(cniErr))
	g.Expect(err.Error()).To(And(ContainSubstring("no IP addresses available"), ContainSubstring("container f"), ContainSubstring("10.244.7.0/29")))

	allocs, err := ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(ContainElement(Allocation{IP: got[0].Addr(), ContainerID: "a", IfName: "eth0"}))
	g.Expect(allocs).To(HaveLen(5))

	// Release is idempotent and needs no Pod CIDR; round robin gives the freed addresses in turn,
	// from after the last one reserved.
	g.Expect(ipam.Release(ctx, Request{ContainerID: "c", IfName: "eth0"})).To(Succeed())
	g.Expect(ipam.Release(ctx, Request{ContainerID: "a", IfName: "eth0"})).To(Succeed())
	g.Expect(ipam.Release(ctx, Request{ContainerID: "a", IfName: "eth0"})).To(Succeed())
	p, err := ipam.Allocate(ctx, req("f"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(got[0]))
	p, err = ipam.Allocate(ctx, req("g"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(got[2]))

	// An allocation left by an ADD that did not finish is made again rather than refused.
	again, err := ipam.Allocate(ctx, req("f"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Addr()).To(Equal(got[0].Addr()))
	allocs, err = ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(HaveLen(5))
}

func TestIPAMRejectsBadInput(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ipam := newTestIPAM(t)
	for _, tc := range []struct {
		subnet  string
		gateway string
		want    string
	}{
		{"fd00::/64", "", "IPv4 Pod CIDR"},
		{"10.0.0.0/31", "", "too small"},
		{"10.0.0.0/24", "10.0.1.1", "outside the Pod CIDR"},
	} {
		req := Request{ContainerID: "x", IfName: "eth0", Subnet: netip.MustParsePrefix(tc.subnet)}
		if tc.gateway != "" {
			req.Gateway = netip.MustParseAddr(tc.gateway)
		}
		_, err := ipam.Allocate(ctx, req)
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.subnet)
	}
	allocs, err := ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(BeEmpty())
	_, err = New(Options{})
	g.Expect(err).To(MatchError(ContainSubstring("data directory")))
}

// TestIPAMGivesThePreferredAddressWhenFree: a sandbox made again for a Pod gets the Pod's address
// back when it is free; when another container holds it, or it is outside the range or the
// gateway, the allocation goes on as host-local's.
func TestIPAMGivesThePreferredAddressWhenFree(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ipam := newTestIPAM(t)
	subnet := netip.MustParsePrefix("10.244.7.0/28")
	req := func(id, preferred string) Request {
		r := Request{ContainerID: id, IfName: "eth0", Subnet: subnet}
		if preferred != "" {
			r.Preferred = netip.MustParseAddr(preferred)
		}
		return r
	}
	for _, id := range []string{"a", "b", "c"} { // .2, .3, .4
		_, err := ipam.Allocate(ctx, req(id, ""))
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(ipam.Release(ctx, req("b", ""))).To(Succeed())
	p, err := ipam.Allocate(ctx, req("b2", "10.244.7.3"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(netip.MustParsePrefix("10.244.7.3/28")), "the freed address, not the next in turn (.5)")

	for _, preferred := range []string{"10.244.7.2", "10.244.8.2", "10.244.7.1"} { // held, outside, the gateway
		p, err := ipam.Allocate(ctx, req("x-"+preferred, preferred))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Addr()).NotTo(Equal(netip.MustParseAddr(preferred)), preferred)
	}
}
