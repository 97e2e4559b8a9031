package networkpolicy

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestGateOpensOnlyForAPassThatCoveredThePod: WaitPolicies asks for a pass and returns only once a
// committed pass compiled the Pod, known from the Pod cache, at the ofport asked for.
func TestGateOpensOnlyForAPassThatCoveredThePod(t *testing.T) {
	g := NewWithT(t)
	r := &Reconciler{}
	r.gate.init() // as SetupWithManager does
	web := types.NamespacedName{Namespace: "x", Name: "web"}
	done := make(chan error, 1)
	go func() { done <- r.WaitPolicies(context.Background(), web, 10) }()
	g.Eventually(r.gate.wake).Should(Receive(), "the wait asks for a pass")

	// A pass without the Pod's attachment, one where the Pod is not in the cache (its labels are
	// unknown, so no policy could select it), one at another ofport: the gate stays closed.
	in := testInputs()
	in.Local = nil
	r.covered(in)
	in = testInputs()
	in.Pods = in.Pods[1:]
	r.covered(in)
	in = testInputs()
	in.Local[0].Pod = pipeline.Pod{OFPort: 12}
	r.covered(in)
	g.Consistently(done, 100*time.Millisecond).ShouldNot(Receive())

	r.covered(testInputs())
	g.Eventually(done).Should(Receive(BeNil()))
	g.Expect(r.WaitPolicies(context.Background(), web, 10)).To(Succeed(), "a covered Pod does not wait")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	g.Expect(r.WaitPolicies(ctx, types.NamespacedName{Namespace: "x", Name: "new"}, 13)).To(MatchError(context.DeadlineExceeded))
}
