package networkpolicy

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
)

// TestRuleCountersRunningTotals: each read adds what a flow counted since the previous one; a flow
// whose counter went back was replaced and counted from zero since; two flows of one series add up;
// a series no flow stands for any more goes.
func TestRuleCountersRunningTotals(t *testing.T) {
	g := NewWithT(t)
	c := newRuleCounters(nodenetwork.NewState())
	web := counterKey{kind: nodenetwork.KindNetworkPolicy, namespace: "x", name: "web", rule: "ingress[0]", dir: "ingress", action: nodenetwork.ActionAllow}
	drop := counterKey{kind: nodenetwork.KindNetworkPolicy, namespace: "x", rule: DefaultDenyRule, dir: "ingress", action: ActionDrop}
	newFlow, estFlow, dropFlow := flowKey{table: 102, priority: 200, object: 1}, flowKey{table: 102, priority: 200, object: 2}, flowKey{table: 100, priority: 200, object: 3}

	c.apply(map[flowKey]counted{
		newFlow:  {series: web, values: counterValues{packets: 2, bytes: 120, connections: 2}},
		estFlow:  {series: web, values: counterValues{packets: 10, bytes: 5000}},
		dropFlow: {series: drop, values: counterValues{packets: 1, bytes: 60, connections: 1}},
	})
	g.Expect(c.totals).To(Equal(map[counterKey]counterValues{web: {12, 5120, 2}, drop: {1, 60, 1}}))

	// The established flow was replaced (ovs-vswitchd restarted): it counts 3 packets from zero.
	c.apply(map[flowKey]counted{
		newFlow:  {series: web, values: counterValues{packets: 3, bytes: 180, connections: 3}},
		estFlow:  {series: web, values: counterValues{packets: 3, bytes: 300}},
		dropFlow: {series: drop, values: counterValues{packets: 1, bytes: 60, connections: 1}},
	})
	g.Expect(c.totals).To(Equal(map[counterKey]counterValues{web: {16, 5480, 3}, drop: {1, 60, 1}}), "never back")

	// The namespace's isolated Pod is gone: its series goes.
	c.apply(map[flowKey]counted{
		newFlow: {series: web, values: counterValues{packets: 3, bytes: 180, connections: 3}},
		estFlow: {series: web, values: counterValues{packets: 3, bytes: 300}},
	})
	g.Expect(c.totals).To(Equal(map[counterKey]counterValues{web: {16, 5480, 3}}))
}
