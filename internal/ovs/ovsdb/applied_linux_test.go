package ovsdb_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// TestEnsurePortAppliedWaitsForVswitchd checks that EnsurePortApplied returns once ovs-vswitchd has
// applied the port, as EnsurePort and WaitApplied do, in one transaction.
func TestEnsurePortAppliedWaitsForVswitchd(t *testing.T) {
	g := NewWithT(t)
	o, c, ctx := withBridge(t)
	g.Expect(c.WaitApplied(ctx)).To(Succeed())
	g.Expect(o.SignalVswitchd(syscall.SIGSTOP)).To(Succeed())
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = o.SignalVswitchd(syscall.SIGCONT)
		}
	})
	spec := ovsdb.PortSpec{Name: "applied0", Type: ovsdb.PortTypeInternal}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	before := c.Transactions()
	_, err := c.EnsurePortApplied(wctx, "br-int", spec)
	g.Expect(err).To(MatchError(context.DeadlineExceeded), "a frozen ovs-vswitchd applies nothing")
	g.Expect(c.Transactions()-before).To(Equal(uint64(1)), "the port and next_cfg in one transaction")

	g.Expect(o.SignalVswitchd(syscall.SIGCONT)).To(Succeed())
	resumed = true
	spec.ExternalIDs = map[string]string{"bound": "true"}
	changed, err := c.EnsurePortApplied(ctx, "br-int", spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	out, err := o.Appctl("dpif/show")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("applied0"), "applied: the port is in the datapath")
	changed, err = c.EnsurePortApplied(ctx, "br-int", spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "nothing to change the second time")
}
