package nodenetwork

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestFlowsInstalled: the agent is ready only once the node network is realised and every flow owner has
// installed its flows on the current bridge connection; a new connection (a new ovs-vswitchd, a rebuilt
// bridge) makes it wait for them again.
func TestFlowsInstalled(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := NewState()
	s.AddFlowOwner(ServiceFlows)
	g.Expect(s.FlowsInstalled()).To(MatchError(ContainSubstring("not realised")))
	first := &openflow.Bridge{}
	s.setRealized(&Realized{Flows: first})
	g.Expect(s.FlowsInstalled()).To(MatchError(ContainSubstring("0 of 4")))
	owners := append(append([]FlowOwner{}, flowOwners...), ServiceFlows)
	for i, o := range owners {
		s.FlowsSynced(ctx, o, first)
		if i < len(owners)-1 {
			g.Expect(s.FlowsInstalled()).To(HaveOccurred(), "after %d of %d owners", i+1, len(owners))
		}
	}
	g.Expect(s.FlowsInstalled()).To(Succeed())
	s.setRealized(&Realized{Flows: &openflow.Bridge{}})
	g.Expect(s.FlowsInstalled()).To(HaveOccurred(), "a new connection")
}
