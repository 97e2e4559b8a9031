//go:build !windows

package helm

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/egress"
	"github.com/winnet-io/winnet/internal/controller"
	egresslease "github.com/winnet-io/winnet/internal/egress"
)

// testAgentEgressLeases: the agent's own renewal of its Egress Lease (egress.Fence, with agent A's
// token bound to its Pod on win-a) is admitted, and the admission policy winnet-agent-egress-lease
// refuses what the Role winnet-agent would otherwise let an agent do in the release namespace: write
// another node's Egress Lease (create, renew, delete), create a Lease of its own node's name held by
// another node, or take winnet-controller's leader election Lease.
func testAgentEgressLeases(ctx context.Context, t *testing.T, admin client.Client, agentA, agentB tokenClientSet) {
	g := NewWithT(t)
	refused := func(message string) OmegaMatcher { return beDeniedBy("winnet-agent-egress-lease", message) }
	fenceA := &egress.Fence{Reader: agentA.c, Writer: agentA.c, Namespace: ns, NodeName: "win-a",
		Duration: egress.DefaultLeaseDuration, RenewInterval: egress.DefaultLeaseRenewInterval}
	// The policy may take a moment to be active after the install; so may the RoleBinding.
	g.Eventually(func() error { return fenceA.Renew(ctx, time.Now()) }, 10*time.Second, 200*time.Millisecond).Should(Succeed(), "create")
	g.Expect(fenceA.Renew(ctx, time.Now())).To(Succeed(), "renew")
	own := &coordinationv1.Lease{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: egresslease.LeaseName("win-a")}, own)).To(Succeed())
	g.Expect(own.Spec.HolderIdentity).To(HaveValue(Equal("win-a")))
	g.Expect(own.Spec.LeaseDurationSeconds).To(HaveValue(BeEquivalentTo(10)))

	// Node B's agent, with its own token, on node A's Lease.
	theirs := &coordinationv1.Lease{}
	g.Expect(agentB.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: egresslease.LeaseName("win-a")}, theirs)).To(Succeed())
	theirs.Spec.HolderIdentity = ptr.To("win-b")
	theirs.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	want := "winnet-agent of node win-b may write only Lease winnet-egress-win-b, not " + ns + "/winnet-egress-win-a"
	g.Expect(agentB.c.Update(ctx, theirs.DeepCopy())).To(refused(want), "renew node A's Lease")
	theirs.Spec.HolderIdentity = ptr.To("win-a")
	g.Expect(agentB.c.Update(ctx, theirs.DeepCopy())).To(refused(want), "renew node A's Lease in node A's name")
	g.Expect(agentB.c.Delete(ctx, theirs.DeepCopy())).To(HaveOccurred(), "delete node A's Lease (no RBAC verb, and the policy)")
	fenceBAsA := &egress.Fence{Reader: agentB.c, Writer: agentB.c, Namespace: ns, NodeName: "win-a",
		Duration: egress.DefaultLeaseDuration, RenewInterval: egress.DefaultLeaseRenewInterval}
	g.Expect(fenceBAsA.Renew(ctx, time.Now())).To(refused(want), "node B's token through the agent's own code, naming node A")
	g.Expect(admin.Delete(ctx, own)).To(Succeed())
	g.Expect(fenceBAsA.Renew(ctx, time.Now())).To(refused(want), "create node A's Lease before node A does")

	// Its own node's name, held by another node.
	forged := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: egresslease.LeaseName("win-b")},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("win-a"), LeaseDurationSeconds: ptr.To[int32](10)}}
	g.Expect(agentB.c.Create(ctx, forged)).To(refused("winnet-agent of node win-b may write Lease winnet-egress-win-b only held by its node"))

	// winnet-controller's leader election.
	leader := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controller.LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("win-b"), LeaseDurationSeconds: ptr.To[int32](3600)}}
	existing := &coordinationv1.Lease{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(leader), existing); err == nil {
		existing.Spec.HolderIdentity = ptr.To("win-b")
		g.Expect(agentB.c.Update(ctx, existing)).To(refused("may write only Lease winnet-egress-win-b, not " + ns + "/" + controller.LeaderElectionID))
	} else {
		g.Expect(agentB.c.Create(ctx, leader)).To(refused("may write only Lease winnet-egress-win-b, not " + ns + "/" + controller.LeaderElectionID))
	}
}
