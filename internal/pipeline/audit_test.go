package pipeline

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// auditedPolicy is testPolicy with every rule and default drop audited, and an allow-all rule.
func auditedPolicy() Policy {
	p := testPolicy()
	for i := range p.Rules {
		p.Rules[i].Audit = true
	}
	p.Rules = append(p.Rules, PolicyRule{ID: 9, Direction: PolicyIngress, Pods: []Pod{npPod1}, AnyPeer: true, Audit: true})
	p.AuditIngressDrops = map[uint32]bool{npPod1.OFPort: true}
	p.AuditEgressDrops = map[uint32]bool{npPod2.OFPort: true}
	return p
}

// TestAuditFlows: an audited rule's decision flows (conj_id, allow-all, default drop) send the
// packet to the agent before their own actions, under a cookie that names the rule; nothing else
// changes, and an unaudited policy's flows are exactly what they were.
func TestAuditFlows(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	plain, audited := n.PolicyFlows(testPolicy()), n.PolicyFlows(auditedPolicy())
	byKey := func(flows []openflow.Flow) map[string]openflow.Flow {
		out := map[string]openflow.Flow{}
		for _, f := range flows {
			k := openflow.Flow{Table: f.Table, Priority: f.Priority, Match: f.Match}
			out[k.String()] = f
		}
		return out
	}
	before := byKey(plain)
	changed := map[string]uint64{}
	for k, f := range byKey(audited) {
		b, ok := before[k]
		cookie := f.Cookie
		if !ok || b.String() != f.String() {
			f.Cookie = 0
			changed[f.String()] = cookie
		}
	}
	g.Expect(changed).To(Equal(map[string]uint64{
		"table=90, priority=190,conj_id=1,ip actions=CONTROLLER:128,set_field:0x1->reg9,goto_table:102": AuditRuleObject(1),
		"table=90, priority=190,conj_id=2,ip actions=CONTROLLER:128,set_field:0x2->reg9,goto_table:102": AuditRuleObject(2),
		"table=50, priority=190,conj_id=3,ip actions=CONTROLLER:128,set_field:0x3->reg8,goto_table:62":  AuditRuleObject(3),
		"table=50, priority=190,conj_id=4,ip actions=CONTROLLER:128,set_field:0x4->reg8,goto_table:62":  AuditRuleObject(4),
		"table=90, priority=190,conj_id=5,ip actions=CONTROLLER:128,set_field:0x5->reg9,goto_table:102": AuditRuleObject(5),
		"table=50, priority=190,conj_id=6,ip actions=CONTROLLER:128,set_field:0x6->reg8,goto_table:62":  AuditRuleObject(6),
		"table=90, priority=205,ip,reg1=0xa actions=CONTROLLER:128,set_field:0x9->reg9,goto_table:102":  AuditRuleObject(9),
		"table=100, priority=200,ip,reg1=0xa actions=CONTROLLER:128":                                    AuditDropObject(PolicyIngress),
		"table=60, priority=200,ip,in_port=11 actions=CONTROLLER:128":                                   AuditDropObject(PolicyEgress),
		// The allow-all rule's counter flows (counters.go), unaudited: they count, they do not decide.
		"table=102, priority=200,ct_state=+new+trk,ct_label=0/0xffffffff000000000000000000000000,ip,reg9=0x9 actions=goto_table:105":              PolicyCounterObject(CounterNew, PolicyIngress, 9),
		"table=102, priority=200,ct_state=+trk,ct_label=0x9000000000000000000000000/0xffffffff000000000000000000000000,ip actions=goto_table:105": PolicyCounterObject(CounterEstablished, PolicyIngress, 9),
	}))
	g.Expect(audited).To(HaveLen(len(plain) + 3)) // the allow-all rule's flow and its two counter flows

	// The cookies decode to what they name; other policy objects are not audit objects.
	id, _, rule, drop := AuditObject(openflow.MakeCookie(3, CategoryPolicy, AuditRuleObject(6)))
	g.Expect([]any{id, rule, drop}).To(Equal([]any{uint32(6), true, false}))
	_, dir, rule, drop := AuditObject(openflow.MakeCookie(3, CategoryPolicy, AuditDropObject(PolicyEgress)))
	g.Expect([]any{dir, rule, drop}).To(Equal([]any{PolicyEgress, false, true}))
	for _, obj := range []uint64{0, PolicyPeerObject(PolicyEgress, netip.MustParsePrefix("10.0.0.0/8")), PolicyPeerObject(PolicyIngress, netip.MustParsePrefix("0.0.0.0/0")),
		ClusterRuleObject(BaselineTier, PolicyEgress, ClusterPriorityHighest)} {
		_, _, rule, drop := AuditObject(obj)
		g.Expect(rule || drop).To(BeFalse(), "%#x", obj)
	}

	// ClusterNetworkPolicy: the decision flows (conj_id, subject-only) of audited rules, Deny and
	// Pass included, under their rule's object as always.
	cp := testClusterPolicy()
	plainC := strs(withCookie(n.ClusterPolicyFlows(cp), 0))
	for i := range cp.Rules {
		cp.Rules[i].Audit = true
	}
	g.Expect(strs(withCookie(n.ClusterPolicyFlows(cp), 0))).To(Equal([]string{
		plainC[0], plainC[1], plainC[2],
		"table=46, priority=60000,conj_id=2147609184,ip actions=CONTROLLER:128",
		plainC[4], plainC[5],
		"table=46, priority=59999,conj_id=2147609183,ip actions=CONTROLLER:128,goto_table:48",
		plainC[7], plainC[8],
		"table=82, priority=60000,conj_id=2147543648,ip actions=CONTROLLER:128,set_field:0x8000ea60->reg9,goto_table:102",
		plainC[10], plainC[11], // the Accept rule's counter flows, unaudited
		"table=101, priority=60000,ip,reg1=0xb actions=CONTROLLER:128",
	}))

	// Every audited flow passes the Windows datapath profile.
	d := Datapath{Flows: append(audited, n.ClusterPolicyFlows(cp)...)}
	g.Expect(CheckWindows(d)).To(BeEmpty())
}
