package service

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestUDPZones: each UDP port gets a zone of its own from the budget, flushed before use; a zone
// is flushed when one of its port's endpoints goes (not when one is added); a released zone is
// given out again, and flushed again first; a failed flush stays to do; beyond the budget a port
// gets no zone.
func TestUDPZones(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	var z udpZones
	var flushed []uint16
	fail := false
	flush := func(_ context.Context, zone uint16) error {
		if fail {
			return errors.New("switch gone")
		}
		flushed = append(flushed, zone)
		return nil
	}
	run := func(f func(context.Context, func(context.Context, uint16) error) ([]uint16, error)) []uint16 {
		flushed = nil
		_, err := f(ctx, flush)
		g.Expect(err).NotTo(HaveOccurred())
		return flushed
	}
	dns, web := portKey{Name: "dns", Port: 53}, portKey{Name: "web", Port: 80}
	first := pipeline.ServiceUDPZoneFirst
	g.Expect(z.zone(dns)).To(Equal(first))
	g.Expect(z.zone(web)).To(Equal(first + 1))
	g.Expect(z.zone(dns)).To(Equal(first), "a port keeps its zone")
	g.Expect(run(z.flushUnflushed)).To(Equal([]uint16{first, first + 1}), "a zone is flushed when given out")
	g.Expect(run(z.flushUnflushed)).To(BeEmpty())

	a, b, c := netip.MustParseAddrPort("10.244.1.5:53"), netip.MustParseAddrPort("10.244.2.7:53"), netip.MustParseAddrPort("10.244.3.9:53")
	old := map[portKey]udpPort{dns: {zone: first, endpoints: []netip.AddrPort{a, b}}}
	z.endpointsGone(old, map[portKey]udpPort{dns: {zone: first, endpoints: []netip.AddrPort{a, b, c}}})
	g.Expect(run(z.flushStale)).To(BeEmpty(), "an added endpoint flushes nothing")
	z.endpointsGone(old, map[portKey]udpPort{dns: {zone: first, endpoints: []netip.AddrPort{b, c}}})
	g.Expect(run(z.flushUnflushed)).To(BeEmpty())
	g.Expect(run(z.flushStale)).To(Equal([]uint16{first}), "an endpoint gone flushes its port's zone")

	fail = true
	z.endpointsGone(old, map[portKey]udpPort{dns: {zone: first}})
	_, err := z.flushStale(ctx, flush)
	g.Expect(err).To(MatchError(ContainSubstring("switch gone")))
	fail = false
	g.Expect(run(z.flushStale)).To(Equal([]uint16{first}), "a failed flush is still to do")

	z.release(func(k portKey) bool { return k == dns })
	g.Expect(z.zone(portKey{Name: "new", Port: 53})).To(Equal(first+1), "the zone of a port that went is given out again")
	g.Expect(run(z.flushUnflushed)).To(Equal([]uint16{first + 1}), "and flushed before it is used")

	for i := range udpZoneBudget - 2 {
		g.Expect(z.zone(portKey{Name: "many", Port: int32(i)})).NotTo(BeZero())
	}
	g.Expect(z.zone(portKey{Name: "over", Port: 53})).To(BeZero(), "no zone beyond the budget")
	g.Expect(z.zone(portKey{Name: "many", Port: 0})).To(Equal(first+2), "ports keep their zones when the budget is spent")
}
