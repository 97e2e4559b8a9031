package networkpolicy

import (
	"errors"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestPeerWatchKeys: the Pod watches a node opens are one per distinct peer, filtered by the API
// server; only a peer of every Pod of the cluster opens the unfiltered watch (issue 38).
func TestPeerWatchKeys(t *testing.T) {
	namespaces := map[string]map[string]string{
		"local": {"team": "a"}, "front": {"tier": "front"}, "back": {"tier": "back"}, "other": nil,
	}
	sel := func(kv ...string) *metav1.LabelSelector {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return &metav1.LabelSelector{MatchLabels: m}
	}
	ingress := func(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "local", Name: "np"}, Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers}},
		}}
	}
	for _, tc := range []struct {
		name     string
		policies []networkingv1.NetworkPolicy
		want     []string
	}{
		{"no policy: no watch", nil, []string{}},
		{"an ipBlock: no watch", []networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}})}, []string{}},
		{"a podSelector: its label selector in the policy's namespace",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "web")})}, []string{"local/app=web"}},
		{"the same selector twice: one watch",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "web")}), ingress(networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "web")})},
			[]string{"local/app=web"}},
		{"a namespaceSelector alone: one watch of every Pod per namespace it selects",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("tier", "front")})}, []string{"front/*"}},
		{"a namespaceSelector and an empty podSelector: the same",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("tier", "front"), PodSelector: sel()})}, []string{"front/*"}},
		{"a namespaceSelector and a podSelector: one cluster-wide watch of the podSelector",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("tier", "front"), PodSelector: sel("app", "client")})},
			[]string{"*/app=client"}},
		{"a namespace's watch of every Pod covers a selector watch in it",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "web")}, networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("team", "a")})},
			[]string{"local/*"}},
		{"an empty namespaceSelector: every Pod, one unfiltered watch",
			[]networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel()}, networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "web")})},
			[]string{"*/*"}},
		{"named egress ports to anyone: every Pod", []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "local"}, Spec: networkingv1.NetworkPolicySpec{
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("http"))}}}},
		}}}, []string{"*/*"}},
		{"numbered egress ports to anyone: no watch", []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "local"}, Spec: networkingv1.NetworkPolicySpec{
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(80))}}}},
		}}}, []string{}},
		{"a selector that does not parse selects nothing: no watch", []networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Bogus"}}}})}, []string{}},
		{"an expression selector is sent as the API server parses it", []networkingv1.NetworkPolicy{ingress(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"b", "a"}}}}})},
			[]string{"local/app in (a,b)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []string{}
			for k := range peerWatchKeys(tc.policies, namespaces) {
				got = append(got, k.String())
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("watches = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNamespacesReadDiffer: a Namespace's change counts only on a label key that a policy's
// namespace selector reads (issue 37).
func TestNamespacesReadDiffer(t *testing.T) {
	policies := []networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"team": "a"}}}}}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpDoesNotExist}}}}}}},
	}}}
	read := readNamespaces(policies, nil)
	for _, tc := range []struct {
		old, now map[string]string
		want     bool
	}{
		{map[string]string{"team": "a"}, map[string]string{"team": "a", "owner": "x"}, false},
		{map[string]string{"team": "a"}, map[string]string{"team": "b"}, true},
		{map[string]string{"team": "a"}, map[string]string{"team": "a", "env": ""}, true},
		{nil, map[string]string{"unread": "1"}, false},
	} {
		if got := read.differ(tc.old, tc.now); got != tc.want {
			t.Errorf("differ(%v, %v) = %v, want %v", tc.old, tc.now, got, tc.want)
		}
	}
}

// TestPodInNamespaceUnknownToThePassTakesTheFullPass: a namespace created after the last full pass
// took no pass of its own, so its Pods' labels are matched against namespace labels the index
// does not have: the change takes the full pass.
func TestPodInNamespaceUnknownToThePassTakesTheFullPass(t *testing.T) {
	x := &peerIndex{namespaces: map[string]map[string]string{"known": nil}, local: map[types.NamespacedName]bool{}}
	_, err := x.podChanged(types.NamespacedName{Namespace: "new", Name: "p"}, &PodInfo{Namespace: "new", Name: "p"})
	if !errors.Is(err, errFullPass) {
		t.Fatalf("podChanged = %v, want errFullPass", err)
	}
	if _, err := x.podChanged(types.NamespacedName{Namespace: "known", Name: "p"}, &PodInfo{Namespace: "known", Name: "p"}); err != nil {
		t.Fatalf("podChanged in a known namespace: %v", err)
	}
}

// TestNamespaceCreatedSelected: a namespace created after the last full pass counts when a
// namespace selector of a peer selects it: a peer of every Pod of the namespaces it selects (its
// watch must open), and a peer with a podSelector of its own too (its Pods may have come through
// the cluster-wide watch before the namespace reached the cache, and the full pass they took could
// not match them).
func TestNamespaceCreatedSelected(t *testing.T) {
	policies := []networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"prod"}}}}},
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}},
		}}},
	}}}
	read := readNamespaces(policies, nil)
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{nil, true}, // NotIn selects a namespace without the key
		{map[string]string{"env": "prod"}, false},
		{map[string]string{"env": "prod", "team": "a"}, true},
		{map[string]string{"env": "prod", "team": "b"}, false},
	} {
		if got := read.selects(tc.labels); got != tc.want {
			t.Errorf("selects(%v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
}

// TestNamespaceCreatedAfterItsPods: the Pods of a new namespace reached the agent through the
// cluster-wide watch of a peer's podSelector before the namespace reached its cache, so the full
// pass they took could not match them; the namespace's creation must then take the full pass.
func TestNamespaceCreatedAfterItsPods(t *testing.T) {
	policies := []networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}},
		}}},
	}}}
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"team": "a"}, true},
		{map[string]string{"team": "b"}, false},
	} {
		r := &Reconciler{}
		r.nsRead = readNamespaces(policies, map[string]map[string]string{"old": {"team": "a"}})
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		r.namespaceChanged(q, "new", nil, tc.labels, true)
		_, full, _ := r.takeChanged()
		if full != tc.want || (q.Len() == 1) != tc.want {
			t.Errorf("namespace created with %v: full pass %v (queued %d), want %v", tc.labels, full, q.Len(), tc.want)
		}
		q.ShutDown()
	}
}
