package openflow_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestFlowMonitorPutsBackDeletedFlows deletes flows behind the bridge's back — one flow, then every
// flow of the switch — and expects them back at once, without any Sync or Verify: the switch's flow
// monitor reported the removals. Flows the bridge deletes itself stay deleted.
func TestFlowMonitorPutsBackDeletedFlows(t *testing.T) {
	g := NewWithT(t)
	e := setupWithMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	route := func(i int) openflow.Flow {
		dst := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		return openflow.Flow{Table: 70, Priority: 200, Cookie: uint64(i + 1),
			Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.PrefixFrom(dst, 32))},
			Actions: []openflow.Action{openflow.SetEthDst(vmac), openflow.SetTunDst(nodeIP), openflow.Output(1)}}
	}
	const n = 2000
	routes := make([]openflow.Flow, n)
	for i := range routes {
		routes[i] = route(i)
	}
	_, err := e.br.Sync(ctx, 5, routes)
	g.Expect(err).NotTo(HaveOccurred())
	var features []openflow.Flow // without the flow that needs a group
	for _, f := range featureFlows() {
		if !strings.Contains(f.String(), "group:") {
			features = append(features, f)
		}
	}
	_, err = e.br.Sync(ctx, 2, features)
	g.Expect(err).NotTo(HaveOccurred())
	want := rendered(append(e.br.Installed(5), e.br.Installed(2)...))
	g.Expect(dump(t, e.ovs)).To(Equal(want))

	back := func(what string, deleted int) {
		t.Helper()
		start := time.Now()
		g.Eventually(func() []string { return dump(t, e.ovs) }).WithTimeout(5*time.Second).WithPolling(5*time.Millisecond).
			Should(Equal(want), "%s: put back", what)
		t.Logf("%s: %d flows back in %v", what, deleted, time.Since(start).Round(time.Millisecond))
	}

	before := e.br.Repairs()
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "--strict", "del-flows", bridge, "table=70,priority=200,ip,nw_dst=10.1.0.7")
	back("one flow deleted", 1)
	g.Expect(e.br.Repairs()-before).To(BeNumerically("==", 1), "only the deleted flow is sent again")

	before = e.br.Repairs()
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "del-flows", bridge)
	back("every flow deleted", len(want))
	g.Eventually(e.br.Repairs).Should(BeNumerically(">=", before+uint64(len(want))), "every flow was sent again")

	// The bridge's own deletion is not drift, also when flows of the same table, priority and cookie
	// stay (a Pod's or a policy rule's flows).
	before = e.br.Repairs()
	routes[1].Cookie, routes[2].Cookie = routes[3].Cookie, routes[3].Cookie
	_, err = e.br.Sync(ctx, 5, routes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.br.Sync(ctx, 5, append([]openflow.Flow{routes[0]}, routes[2:]...))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.br.Sync(ctx, 5, routes[2:])
	g.Expect(err).NotTo(HaveOccurred())
	want = rendered(append(e.br.Installed(5), e.br.Installed(2)...))
	g.Consistently(func() []string { return dump(t, e.ovs) }).WithTimeout(500*time.Millisecond).WithPolling(50*time.Millisecond).
		Should(Equal(want), "a flow the bridge deleted stays deleted")
	g.Expect(e.br.Repairs()).To(Equal(before))
}
