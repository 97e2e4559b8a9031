package openflow_test

import (
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestVerifyEndsWhenTheSwitchGoes: a flow dump waiting for its reply when ovs-vswitchd dies ends with
// the disconnection, not with its own timeout. Verify holds the lock the replay after the restart
// needs, so a dump that waited out its timeout kept every flow off the restarted switch that long
// (seen in the e2e Services restart test: the replay took 10 s).
func TestVerifyEndsWhenTheSwitchGoes(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group := openflow.Group{ID: 1, Buckets: []openflow.Bucket{{Weight: 100, Actions: []openflow.Action{openflow.Output(1)}}}}
	_, err := e.br.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = e.br.Sync(ctx, 2, featureFlows())
	g.Expect(err).NotTo(HaveOccurred())

	// Frozen, ovs-vswitchd keeps the connection open and answers nothing.
	g.Expect(e.ovs.SignalVswitchd(syscall.SIGSTOP)).To(Succeed())
	done := make(chan error, 1)
	go func() {
		_, err := e.br.Verify(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Verify returned %v from a frozen switch", err)
	case <-time.After(300 * time.Millisecond):
	}
	g.Expect(e.ovs.KillVswitchd()).To(Succeed())
	err = <-done
	g.Expect(err).To(MatchError(ContainSubstring("disconnected before it replied")),
		"the dump ends because the connection went, not because it timed out")

	g.Expect(e.ovs.StartVswitchd()).To(Succeed())
	g.Eventually(func() ([]string, error) { return e.ovs.DumpFlows(bridge) }).
		WithTimeout(5 * time.Second).Should(HaveLen(len(featureFlows())))
}

// TestVerifyLetsSyncsGoOn: Verify dumps the switch without holding the bridge's lock, so flows of
// single objects change while it compares 20,000 (a Service's endpoint while the node network checks
// for drift): such changes complete during a Verify, and a flow changed during the dump is never
// reported as a difference.
func TestVerifyLetsSyncsGoOn(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	flow := func(object uint64, port uint32) openflow.Flow {
		return openflow.Flow{Table: 70, Priority: 200, Cookie: object,
			Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(object >> 16), byte(object >> 8), byte(object)}), 32))},
			Actions: []openflow.Action{openflow.Output(port)}}
	}
	var all []openflow.Flow
	for i := range uint64(20000) {
		all = append(all, flow(i+1, 1))
	}
	_, err := e.br.Sync(ctx, 6, all)
	g.Expect(err).NotTo(HaveOccurred())

	during := 0
	for round := range 5 {
		done := make(chan []openflow.Difference, 1)
		go func() {
			diffs, err := e.br.Verify(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			done <- diffs
		}()
		for i := uint64(0); ; i++ {
			select {
			case diffs := <-done:
				g.Expect(diffs).To(BeEmpty(), "round %d: flows changed during the dump are not differences", round)
				goto next
			default:
			}
			// One object's flow changes its action, or goes and comes back (its identity changes).
			object := uint64(round*1000) + i%1000 + 1
			if i%2 == 0 {
				_, err = e.br.SyncObject(ctx, 6, object, []openflow.Flow{flow(object, uint32(2+i%3))})
			} else {
				_, err = e.br.SyncObject(ctx, 6, object, nil)
				g.Expect(err).NotTo(HaveOccurred())
				_, err = e.br.SyncObject(ctx, 6, object, []openflow.Flow{flow(object, 1)})
			}
			g.Expect(err).NotTo(HaveOccurred())
			during++
		}
	next:
	}
	g.Expect(during).To(BeNumerically(">", 0), "changes completed while Verify dumped the switch")
	diffs, err := e.br.Verify(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(diffs).To(BeEmpty())
}
