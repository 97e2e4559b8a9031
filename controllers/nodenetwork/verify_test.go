package nodenetwork

import (
	"testing"
	"time"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestVerifyPeriod: the drift check dumps the switch's flows every VerifyPeriod (five resync
// periods, 10 s, by default; issue 37: it dumped them at every 2 s check), and at once on a new
// bridge connection.
func TestVerifyPeriod(t *testing.T) {
	start := time.Now()
	a, b := &openflow.Bridge{}, &openflow.Bridge{}
	r := &Reconciler{}
	if !r.verifyDue(a, start) {
		t.Fatal("a bridge never verified is not due")
	}
	r.lastVerify, r.verified = start, a
	for _, tc := range []struct {
		bridge *openflow.Bridge
		after  time.Duration
		want   bool
	}{
		{a, DefaultResyncPeriod, false},
		{a, 4 * DefaultResyncPeriod, false},
		{a, 10 * time.Second, true},
		{b, time.Second, true},
	} {
		if got := r.verifyDue(tc.bridge, start.Add(tc.after)); got != tc.want {
			t.Errorf("due after %v (same bridge %v) = %v, want %v", tc.after, tc.bridge == a, got, tc.want)
		}
	}
	r.ResyncPeriod = time.Second
	if r.verifyDue(a, start.Add(4*time.Second)) || !r.verifyDue(a, start.Add(5*time.Second)) {
		t.Error("with a 1 s resync the flows are not verified every 5 s")
	}
	r.VerifyPeriod = time.Second
	if !r.verifyDue(a, start.Add(time.Second)) {
		t.Error("VerifyPeriod is not followed")
	}
}
