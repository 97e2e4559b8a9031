package podendpoint

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// portCheckTimeout bounds looking for a Pod's port in CHECK: a port that exists has its ofport.
const portCheckTimeout = 200 * time.Millisecond

// verifyFlows checks that the Pod's flows are installed in the switch.
func (p *Pods) verifyFlows(ctx context.Context, n node, a *Attachment) []string {
	want, err := p.podFlows(n.realized, a)
	if err != nil {
		return []string{err.Error()}
	}
	flows := n.realized.Flows
	installed := 0
	for _, f := range flows.Installed(pipeline.CategoryPod) {
		if f.Cookie&openflow.ObjectMask == uint64(a.OFPort) {
			installed++
		}
	}
	if installed != len(want) {
		return []string{fmt.Sprintf("%d of the Pod's %d flows are installed", installed, len(want))}
	}
	diffs, err := flows.Verify(ctx)
	if err != nil {
		return []string{fmt.Sprintf("reading the switch's flows: %v", err)}
	}
	cookie := fmt.Sprintf("cookie=%#x,", openflow.MakeCookie(flows.Round(), pipeline.CategoryPod, uint64(a.OFPort)))
	missing := 0
	for _, d := range diffs {
		if d.Kind == openflow.Missing && strings.HasPrefix(d.Flow, cookie) {
			missing++
		}
	}
	if missing > 0 {
		return []string{fmt.Sprintf("%d of the Pod's %d flows are missing from the switch", missing, len(want))}
	}
	return nil
}

// syncFlows installs the attachment's flows where they are missing and reports whether any were.
func (p *Pods) syncFlows(ctx context.Context, n node, a *Attachment) (bool, error) {
	res, err := p.installFlows(ctx, n.realized, a)
	return res.Added > 0, err
}
