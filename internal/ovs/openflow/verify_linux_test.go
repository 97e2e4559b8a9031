package openflow_test

import (
	"context"
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
