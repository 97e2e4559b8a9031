package networkpolicy

import (
	"errors"
	"maps"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestPeerNamespaces: a full pass reads the Pods of the local namespaces and of the namespaces
// the peers' namespace selectors select, not every Pod (issue 37), unless a peer may be anywhere.
func TestPeerNamespaces(t *testing.T) {
	namespaces := map[string]map[string]string{
		"local": {"team": "a"}, "front": {"tier": "front"}, "back": {"tier": "back"}, "other": nil,
	}
	local := map[string]bool{"local": true}
	fromTier := func(tier string) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "local", Name: "np"}, Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}}},
				{PodSelector: &metav1.LabelSelector{}},
			}}},
		}}
	}
	for _, tc := range []struct {
		name     string
		policies []networkingv1.NetworkPolicy
		want     []string
		all      bool
	}{
		{"no policy: the local namespaces", nil, []string{"local"}, false},
		{"a namespace selector: the namespaces it selects", []networkingv1.NetworkPolicy{fromTier("front")}, []string{"front", "local"}, false},
		{"an empty namespace selector: every namespace", []networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}},
		}}}, []string{"back", "front", "local", "other"}, false},
		{"named egress ports to anyone: every Pod", []networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("http"))}}}},
		}}}, nil, true},
		{"a selector that does not parse: every Pod", []networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Bogus"}}}}}}},
		}}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, all := peerNamespaces(tc.policies, namespaces, local)
			if all != tc.all {
				t.Fatalf("all = %v, want %v", all, tc.all)
			}
			if !tc.all && !slices.Equal(slices.Sorted(maps.Keys(got)), tc.want) {
				t.Fatalf("namespaces = %v, want %v", slices.Sorted(maps.Keys(got)), tc.want)
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
