package egress

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/winnet-io/winnet/internal/pipeline"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestFenceDropsIPsWhenTheLeaseCannotBeRenewed: a holder whose Lease renewals fail keeps its egress IP
// until F (the Lease duration) after the start of its last confirmed renewal, and gives it up from
// then on (the pass moves it to the IPs to remove); a renewal confirmed again lets it hold the IP
// again and wakes the reconciler. A starting agent (no renewal completed) decides nothing.
func TestFenceDropsIPsWhenTheLeaseCannotBeRenewed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	var broken bool
	var mu sync.Mutex
	fail := func() error {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return errors.New("the API server is unreachable")
		}
		return nil
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	clock := &fakeClock{now: t0}
	f := &Fence{Reader: c, Writer: c, Namespace: "winnet-system", NodeName: "node-a",
		Duration: 10 * time.Second, RenewInterval: 2 * time.Second, Now: clock.Now}
	changed := f.Changed()
	r := &Reconciler{NodeName: "node-a", Fence: f}
	ip := netip.MustParseAddr("192.168.77.150")
	holding := func() desiredState { return desiredState{held: []pipeline.Egress{{ID: 1, IP: ip}}} }

	d := holding()
	_, wait := r.fence(ctx, &d)
	g.Expect(wait).To(BeTrue(), "no renewal yet: the pass waits")

	f.renewOnce(ctx)
	g.Expect(changed).To(Receive(), "the first confirmed renewal wakes the reconciler")
	lease := &coordinationv1.Lease{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "winnet-system", Name: "winnet-egress-node-a"}, lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal("node-a")))
	g.Expect(lease.Spec.LeaseDurationSeconds).To(HaveValue(BeEquivalentTo(10)))
	g.Expect(lease.Spec.RenewTime.Time.Equal(t0)).To(BeTrue())

	// Renewals fail from now on: the IP stays for F after t0, the start of the last confirmed one.
	mu.Lock()
	broken = true
	mu.Unlock()
	for clock.Now().Before(t0.Add(8 * time.Second)) {
		clock.Add(2 * time.Second)
		f.renewOnce(ctx)
	}
	clock.Add(2*time.Second - time.Millisecond) // t0 + F - 1ms
	d = holding()
	recheck, wait := r.fence(ctx, &d)
	g.Expect(wait).To(BeFalse())
	g.Expect(d.held).To(HaveLen(1), "still held just before F")
	g.Expect(recheck).To(BeNumerically("<=", 2*time.Millisecond), "the next pass comes at F")
	clock.Add(time.Millisecond) // t0 + F
	d = holding()
	_, _ = r.fence(ctx, &d)
	g.Expect(d.held).To(BeEmpty(), "given up at F")
	g.Expect(d.others).To(ConsistOf(ip), "the IP is to be taken off the bridge interface")
	g.Expect(changed).NotTo(Receive(), "losing the Lease needs no wake: the pass was timed")

	// Confirmed again: the node may hold the IP again, and the reconciler is woken.
	mu.Lock()
	broken = false
	mu.Unlock()
	clock.Add(time.Second)
	f.renewOnce(ctx)
	g.Expect(changed).To(Receive())
	d = holding()
	_, _ = r.fence(ctx, &d)
	g.Expect(d.held).To(HaveLen(1))
	g.Expect(d.others).To(BeEmpty())
}

// TestFenceRenewsOnlyWhenWanted: the renewal loop writes nothing while no Egress may be held on the
// node (a cluster without Egresses costs no Lease writes), the fence has then decided (a pass does not
// wait) and allows no IP; once wanted, it renews at once, not at the next tick.
func TestFenceRenewsOnlyWhenWanted(t *testing.T) {
	g := NewWithT(t)
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	var writes atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	written := writes.Load
	// A renewal interval far beyond the test: every renewal it sees is one SetWanted asked for.
	f := &Fence{Reader: c, Writer: c, Namespace: "winnet-system", NodeName: "node-a", Duration: time.Hour, RenewInterval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = f.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	f.SetWanted(false)
	g.Consistently(written).WithTimeout(300*time.Millisecond).Should(BeZero(), "no Egress may be held here: no Lease write")
	r := &Reconciler{NodeName: "node-a", Fence: f}
	d := desiredState{}
	_, wait := r.fence(context.Background(), &d)
	g.Expect(wait).To(BeFalse(), "decided: the node holds nothing, and the pass goes on")
	_, valid, _ := f.State(time.Now())
	g.Expect(valid).To(BeFalse())

	f.SetWanted(true)
	g.Eventually(written).WithTimeout(5*time.Second).Should(BeEquivalentTo(1), "renewed at once, not at the next tick")
	// The write is counted when it starts; the fence records it once the API server answered.
	g.Eventually(func() bool {
		_, valid, _ := f.State(time.Now())
		return valid
	}).WithTimeout(5 * time.Second).Should(BeTrue())
	f.SetWanted(true)
	g.Consistently(written).WithTimeout(300*time.Millisecond).Should(BeEquivalentTo(1), "still wanted: the next renewal waits for its tick")
}
