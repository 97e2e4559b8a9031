package networkpolicy

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestIncrementalEqualsFullPass plays random sequences of Pod changes (labels, addresses, Pods
// created and deleted, Pods sharing an address, addresses inside ipBlocks) on policies of every
// kind of peer, and after each change compares the switch as the incremental compiler left it
// (the last full pass's flows plus every peer flow it synced since, by cookie object) with a full
// recompute. A change the incremental compiler declines takes the full pass, as in the reconciler.
func TestIncrementalEqualsFullPass(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies []networkingv1.NetworkPolicy
		// minIncremental is the least share of changes the incremental path must take.
		minIncremental float64
	}{
		{name: "selectors and ipBlocks", policies: incrementalPolicies(false), minIncremental: 0.5},
		{name: "with an egress rule of named ports to every Pod", policies: incrementalPolicies(true), minIncremental: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changedFlows := 0
			for seed := int64(1); seed <= 20; seed++ {
				incremental, full, changed := playIncremental(t, seed, tc.policies, 200)
				if share := float64(incremental) / float64(incremental+full); share < tc.minIncremental {
					t.Fatalf("seed %d: only %d of %d changes took the incremental path", seed, incremental, incremental+full)
				}
				changedFlows += changed
			}
			t.Logf("%d peer flows changed by the incremental path", changedFlows)
			if tc.minIncremental > 0 && changedFlows < 100 {
				t.Fatalf("the incremental path changed only %d peer flows: the changes did not exercise it", changedFlows)
			}
		})
	}
}

// playIncremental runs steps random changes and returns how many took the incremental path and how
// many the full pass, and how many peer flows the incremental path changed.
func playIncremental(t *testing.T, seed int64, policies []networkingv1.NetworkPolicy, steps int) (incremental, full, changed int) {
	t.Helper()
	rnd := rand.New(rand.NewSource(seed))
	node := pipeline.Node{NodeIP: netip.MustParseAddr("192.168.10.11"), GatewayIP: netip.MustParseAddr("10.244.1.1")}
	in := testInputs(policies...)
	in.Namespaces["z"] = map[string]string{"team": "b", "env": "prod"}
	labelChoices := []map[string]string{
		{}, {"app": "client"}, {"app": "db"}, {"app": "client", "tier": "back"}, {"tier": "back"}, {"app": "web"},
	}
	// Addresses from a small pool, so that Pods share them, and some inside the ipBlocks.
	addrChoices := []string{"10.244.2.5", "10.244.2.6", "10.244.2.7", "10.244.3.1", "10.244.3.9", "10.0.0.1", "10.0.1.5", "10.0.7.7"}
	remote := func() PodInfo {
		ns := []string{"x", "y", "z"}[rnd.Intn(3)]
		p := PodInfo{Namespace: ns, Name: fmt.Sprintf("r%d", rnd.Intn(10)), Labels: labelChoices[rnd.Intn(len(labelChoices))]}
		for range rnd.Intn(3) {
			p.IPs = append(p.IPs, netip.MustParseAddr(addrChoices[rnd.Intn(len(addrChoices))]))
		}
		if len(p.Ports) == 0 && rnd.Intn(2) == 0 {
			p.Ports = []NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: uint16(7000 + rnd.Intn(3))}}
		}
		return p
	}
	ids := &conjIDs{}
	d := Compute(in, ids)
	ids.keepOnly(d.ids, d.Policy.IngressClasses, d.Policy.EgressClasses)
	index := d.peers()
	sw := newFlowTable(node.PolicyFlows(d.Policy))
	for step := range steps {
		// One change: a remote Pod created, changed or deleted, or (sometimes) a local Pod relabelled.
		var key types.NamespacedName
		var info *PodInfo
		switch op := rnd.Intn(10); {
		case op == 0:
			i := rnd.Intn(2) // x/web or x/db, attached here
			in.Pods[i].Labels = labelChoices[rnd.Intn(len(labelChoices))]
			p := in.Pods[i]
			key, info = types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, &p
		default:
			p := remote()
			key = types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			i := slices.IndexFunc(in.Pods, func(q PodInfo) bool { return q.Namespace == p.Namespace && q.Name == p.Name })
			switch {
			case i >= 0 && op <= 2:
				in.Pods = slices.Delete(in.Pods, i, i+1)
			case i >= 0:
				in.Pods[i] = p
				info = &p
			default:
				in.Pods = append(in.Pods, p)
				info = &p
			}
		}
		want := Compute(in, ids)
		ids.keepOnly(want.ids, want.Policy.IngressClasses, want.Policy.EgressClasses)

		clauses, err := index.podChanged(key, info)
		switch {
		case errors.Is(err, errFullPass):
			full++
			index = want.peers()
			sw = newFlowTable(node.PolicyFlows(want.Policy))
			continue
		case err != nil:
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		incremental++
		for object, flows := range index.flows(clauses) {
			sw.syncObject(object, flows)
			changed++
		}
		wantFlows := newFlowTable(node.PolicyFlows(want.Policy))
		if !maps.Equal(sw.flows, wantFlows.flows) {
			t.Fatalf("seed %d step %d (pod %s now %+v): the incremental flows differ from a full pass:\n%s", seed, step, key, info, diffTables(sw, wantFlows))
		}
	}
	return incremental, full, changed
}

// incrementalPolicies are policies of namespace x with peers of every kind, some sharing a peer set
// (merged), some selecting nobody at times; with namedAll, an egress rule of named ports to any Pod.
func incrementalPolicies(namedAll bool) []networkingv1.NetworkPolicy {
	client := sel(map[string]string{"app": "client"})
	out := []networkingv1.NetworkPolicy{
		policy("in-pods", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{PodSelector: client}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}},
			{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(map[string]string{"team": "b"})}}},
		}}),
		// The same peers as in-pods' first rule, on the same port: merged with it.
		policy("in-pods-too", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{PodSelector: client}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}},
			{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil), PodSelector: sel(map[string]string{"tier": "back"})},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.0/24"}}}},
				Ports: []networkingv1.NetworkPolicyPort{named("http"), {Protocol: ptr.To(corev1.ProtocolUDP)}}},
		}}),
		policy("out", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(map[string]string{"env": "prod"}), PodSelector: client}, {IPBlock: &networkingv1.IPBlock{CIDR: "10.244.2.5/32"}}}},
				{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "db"})}}, Ports: []networkingv1.NetworkPolicyPort{named("http")}},
				{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil)}, {IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}, Ports: []networkingv1.NetworkPolicyPort{tcp(53)}},
			},
		}),
		policy("nobody-yet", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil), PodSelector: sel(map[string]string{"app": "web"})}}},
		}}),
	}
	if namedAll {
		out = append(out, policy("named-all", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{named("http")}}},
		}))
	}
	return out
}

// flowTable is a switch's flows of the policy category: by match (table, priority, match), the flow
// with its cookie.
type flowTable struct{ flows map[string]string }

func newFlowTable(flows []openflow.Flow) *flowTable {
	t := &flowTable{flows: map[string]string{}}
	for _, f := range flows {
		t.flows[f.MatchString()+fmt.Sprintf(" table=%d", f.Table)] = f.String()
	}
	return t
}

// syncObject makes the flows whose cookie is object equal to flows, as Bridge.SyncObjects does.
func (t *flowTable) syncObject(object uint64, flows []openflow.Flow) {
	prefix := fmt.Sprintf("cookie=%#x, ", object)
	maps.DeleteFunc(t.flows, func(_, f string) bool { return len(f) > len(prefix) && f[:len(prefix)] == prefix })
	for _, f := range flows {
		t.flows[f.MatchString()+fmt.Sprintf(" table=%d", f.Table)] = f.String()
	}
}

func diffTables(got, want *flowTable) string {
	var out string
	for k, f := range got.flows {
		if want.flows[k] != f {
			out += "  only incremental: " + f + "\n"
		}
	}
	for k, f := range want.flows {
		if got.flows[k] != f {
			out += "  only full pass:   " + f + "\n"
		}
	}
	return out
}

// TestStalePeers: the periodic check finds every peer Pod the index has otherwise than the watches
// hold it (a relabelled Pod whose change was lost, a Pod deleted unseen, a new Pod unseen), and
// nothing once the changes are applied; a Pod checked at the same version is not matched again,
// and a change that moves a Pod in no set (a label no selector reads) is not stale.
func TestStalePeers(t *testing.T) {
	in := testInputs(incrementalPolicies(false)...)
	in.Pods = append(in.Pods, PodInfo{Namespace: "x", Name: "client2", Labels: map[string]string{"app": "client"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.2.10")}})
	d := Compute(in, &conjIDs{})
	x := d.peers()
	watched := func(infos []PodInfo, rv map[string]string) []*corev1.Pod {
		var out []*corev1.Pod
		for _, i := range infos {
			p := &corev1.Pod{}
			p.Namespace, p.Name, p.Labels, p.ResourceVersion = i.Namespace, i.Name, i.Labels, rv[i.Namespace+"/"+i.Name]
			if p.ResourceVersion == "" {
				p.ResourceVersion = "1"
			}
			for _, a := range i.IPs {
				p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: a.String()})
			}
			out = append(out, p)
		}
		return out
	}
	checked := map[types.NamespacedName]string{}
	if got := x.stale(watched(in.Pods, nil), checked); len(got) != 0 {
		t.Fatalf("stale after the full pass: %v", got)
	}
	if len(checked) == 0 {
		t.Fatal("no Pod recorded as checked")
	}
	// y/client given another address (lost), x/client2 deleted (lost), y/new created (lost).
	pods := slices.Clone(in.Pods)
	var now []PodInfo
	for _, p := range pods {
		switch p.Namespace + "/" + p.Name {
		case "y/client":
			p.IPs = []netip.Addr{netip.MustParseAddr("10.244.2.8")}
		case "x/client2":
			continue
		}
		now = append(now, p)
	}
	now = append(now, PodInfo{Namespace: "y", Name: "new", Labels: map[string]string{"app": "client"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.2.9")}})
	rv := map[string]string{"y/client": "2", "y/new": "3"}
	got := x.stale(watched(now, rv), checked)
	want := map[types.NamespacedName]string{{Namespace: "x", Name: "client2"}: "", {Namespace: "y", Name: "client"}: "2", {Namespace: "y", Name: "new"}: "3"}
	if !maps.Equal(got, want) {
		t.Fatalf("stale = %v, want %v", got, want)
	}
	for k := range want {
		var info *PodInfo
		for i := range now {
			if now[i].Namespace == k.Namespace && now[i].Name == k.Name {
				info = &now[i]
			}
		}
		if _, err := x.podChanged(k, info); err != nil {
			t.Fatalf("applying %s: %v", k, err)
		}
	}
	if got := x.stale(watched(now, rv), checked); len(got) != 0 {
		t.Fatalf("stale after applying the changes: %v", got)
	}
	// y/client relabelled to what no set's selection depends on (every Pod of team b is a peer).
	for i := range now {
		if now[i].Namespace == "y" && now[i].Name == "client" {
			now[i].Labels = map[string]string{"app": "other"}
		}
	}
	rv["y/client"] = "4"
	if got := x.stale(watched(now, rv), checked); len(got) != 0 {
		t.Fatalf("a relabelled Pod whose sets are the same is stale: %v", got)
	}
	// Checked at the same versions: a label change the version does not show is not looked at.
	now[0].Labels = map[string]string{"app": "changed-without-a-version"}
	if got := x.stale(watched(now, rv), checked); len(got) != 0 {
		t.Fatalf("a Pod checked at the same version was matched again: %v", got)
	}
}
