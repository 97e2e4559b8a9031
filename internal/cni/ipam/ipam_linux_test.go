package ipam

import (
	"context"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
)

// newTestIPAM runs the real host-local plugin of this machine.
func newTestIPAM(t *testing.T) *HostLocal {
	t.Helper()
	ipam, err := New(Options{PluginDirs: []string{"/opt/cni/bin", "/usr/lib/cni"}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("these tests run the real host-local plugin (hack/setup-test-deps.sh installs it): %v", err)
	}
	return ipam
}

func TestIPAMDelegatesToHostLocal(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ipam := newTestIPAM(t)
	subnet := netip.MustParsePrefix("10.244.7.0/29")
	req := func(id string) Request {
		return Request{ContainerID: id, IfName: "eth0", Netns: "/run/netns/x", Subnet: subnet}
	}

	// The /29 has 5 addresses to give: never the gateway (.1), the network or the broadcast address.
	var got []netip.Prefix
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		p, err := ipam.Allocate(ctx, req(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(p.Bits()).To(Equal(29))
		got = append(got, p)
	}
	g.Expect(got).To(ConsistOf(
		netip.MustParsePrefix("10.244.7.2/29"), netip.MustParsePrefix("10.244.7.3/29"), netip.MustParsePrefix("10.244.7.4/29"),
		netip.MustParsePrefix("10.244.7.5/29"), netip.MustParsePrefix("10.244.7.6/29")))

	// Exhausted: host-local's error, with its code, says so and what was asked.
	_, err := ipam.Allocate(ctx, req("f"))
	var cniErr *types.Error
	g.Expect(err).To(BeAssignableToTypeOf(cniErr))
	g.Expect(err.Error()).To(And(ContainSubstring("no IP addresses available"), ContainSubstring("container f"), ContainSubstring("10.244.7.0/29")))

	allocs, err := ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(ContainElement(Allocation{IP: got[0].Addr(), ContainerID: "a", IfName: "eth0"}))
	g.Expect(allocs).To(HaveLen(5))

	// Release is idempotent and needs no Pod CIDR; the address is given again.
	g.Expect(ipam.Release(ctx, Request{ContainerID: "a", IfName: "eth0"})).To(Succeed())
	g.Expect(ipam.Release(ctx, Request{ContainerID: "a", IfName: "eth0"})).To(Succeed())
	p, err := ipam.Allocate(ctx, req("f"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(got[0]))

	// An allocation left by an ADD that did not finish is made again rather than refused.
	again, err := ipam.Allocate(ctx, req("f"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Addr()).To(Equal(got[0].Addr()))
	allocs, err = ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(HaveLen(5))
}

func TestIPAMNeedsThePlugin(t *testing.T) {
	g := NewWithT(t)
	_, err := New(Options{PluginDirs: []string{t.TempDir()}, DataDir: t.TempDir()})
	g.Expect(err).To(MatchError(ContainSubstring("--cni-bin-dir")))
	_, err = New(Options{PluginDirs: []string{"/usr/lib/cni"}})
	g.Expect(err).To(MatchError(ContainSubstring("data directory")))
}
