package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// policyName is the demo's NetworkPolicy: it isolates pod-b2 and admits only pod-a1.
const policyName = "isolate-pod-b2"

// policyDemo labels the Pods (pod-b2 app=isolated, pod-a1 role=trusted; the harness wrote their
// addresses into their status as kubelet does), creates a NetworkPolicy isolating pod-b2 for ingress except
// from pod-a1, and returns a table of new TCP connections to pod-b2 measured with real packets.
func policyDemo(ctx context.Context, c *cluster.Cluster, pods map[string]*cluster.Pod) (string, error) {
	labels := map[string]map[string]string{"pod-b2": {"app": "isolated"}, "pod-a1": {"role": "trusted"}}
	for name, l := range labels {
		obj := &corev1.Pod{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: pods[name].Namespace, Name: name}, obj); err != nil {
			return "", err
		}
		before := obj.DeepCopy()
		obj.Labels = l
		if err := c.Client.Patch(ctx, obj, client.MergeFrom(before)); err != nil {
			return "", fmt.Errorf("labelling Pod %s: %w", name, err)
		}
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: policyName},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: labels["pod-b2"]},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: labels["pod-a1"]},
			}}}},
		},
	}
	if err := c.Client.Create(ctx, np); err != nil {
		return "", fmt.Errorf("creating NetworkPolicy %s: %w", policyName, err)
	}
	server, err := cluster.ServeEcho(pods["pod-b2"].NSPath, cluster.EchoPort)
	if err != nil {
		return "", err
	}
	defer server.Close()
	rows := []struct {
		from, to string
		allowed  bool
		why      string
	}{
		{"pod-a1", "pod-b2", true, "role=trusted is admitted"},
		{"pod-a2", "pod-b2", false, "not selected by the rule: denied"},
		{"pod-b1", "pod-b2", false, "same node, not selected: denied"},
		{"pod-b2", "pod-a2", true, "pod-b2 is isolated for ingress only"},
	}
	var s strings.Builder
	fmt.Fprintf(&s, "NetworkPolicy %s (ingress to app=isolated only from role=trusted), new TCP connections:\n", policyName)
	fmt.Fprintf(&s, "%-24s%-24s%-10s%-10s%s\n", "FROM", "TO", "RESULT", "WANT", "WHY")
	for _, r := range rows {
		from, to := pods[r.from], pods[r.to]
		if r.to != "pod-b2" {
			srv, err := cluster.ServeEcho(to.NSPath, cluster.EchoPort)
			if err != nil {
				return "", err
			}
			defer srv.Close()
		}
		got := connects(ctx, from.Place(), netip.AddrPortFrom(to.IP, cluster.EchoPort), r.allowed)
		fmt.Fprintf(&s, "%-24s%-24s%-10s%-10s%s\n", fmt.Sprintf("%s (%s)", r.from, from.IP), fmt.Sprintf("%s (%s)", r.to, to.IP),
			verdict(got), verdict(r.allowed), r.why)
	}
	return s.String(), nil
}

// connects reports whether a new TCP connection from a place to dst is answered, trying for a few
// seconds until the answer is want: the agents realise the policy a moment after it is created.
func connects(ctx context.Context, from cluster.Place, dst netip.AddrPort, want bool) bool {
	var got bool
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		_, err := cluster.DialEcho(ctx, from, dst, time.Second)
		if got = err == nil; got == want {
			return got
		}
		time.Sleep(300 * time.Millisecond)
	}
	return got
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// clusterPolicyDemo shows the ClusterNetworkPolicy tiers around the demo's NetworkPolicy (which
// admits only pod-a1 to pod-b2): an Admin Deny of pod-a1 to pod-b2, which that NetworkPolicy cannot
// open; then, instead, a Baseline Deny of every Pod to every Pod, which it opens for pod-a1 and which
// holds for a Pod no NetworkPolicy isolates. Both policies are deleted after their rows.
func clusterPolicyDemo(ctx context.Context, c *cluster.Cluster, pods map[string]*cluster.Pod) (string, error) {
	every := &metav1.LabelSelector{}
	admin := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "admin-deny-trusted"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 10,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "isolated"}}}},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From:   []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "trusted"}}}}},
			}},
		},
	}
	baseline := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "baseline-deny-all"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.BaselineTier, Priority: 10,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: every},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From:   []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: every}},
			}},
		},
	}
	type row struct {
		from, to string
		allowed  bool
		why      string
	}
	var s strings.Builder
	fmt.Fprintf(&s, "ClusterNetworkPolicy tiers around %s, new TCP connections:\n", policyName)
	fmt.Fprintf(&s, "%-30s%-24s%-24s%-10s%-10s%s\n", "CLUSTERNETWORKPOLICY", "FROM", "TO", "RESULT", "WANT", "WHY")
	for _, step := range []struct {
		policy *cnpv1beta1.ClusterNetworkPolicy
		rows   []row
	}{
		{admin, []row{{"pod-a1", "pod-b2", false, "Admin Deny: the NetworkPolicy admitting role=trusted cannot open it"}}},
		{baseline, []row{
			{"pod-a1", "pod-b2", true, "Baseline Deny: the NetworkPolicy opens it (pod-b2 is isolated)"},
			{"pod-b1", "pod-a2", false, "Baseline Deny: no NetworkPolicy selects pod-a2"},
		}},
	} {
		if err := c.Client.Create(ctx, step.policy); err != nil {
			return "", fmt.Errorf("creating ClusterNetworkPolicy %s: %w", step.policy.Name, err)
		}
		for _, r := range step.rows {
			from, to := pods[r.from], pods[r.to]
			srv, err := cluster.ServeEcho(to.NSPath, cluster.EchoPort)
			if err != nil {
				return "", err
			}
			got := connects(ctx, from.Place(), netip.AddrPortFrom(to.IP, cluster.EchoPort), r.allowed)
			srv.Close()
			fmt.Fprintf(&s, "%-30s%-24s%-24s%-10s%-10s%s\n", fmt.Sprintf("%s (%s)", step.policy.Name, step.policy.Spec.Tier),
				fmt.Sprintf("%s (%s)", r.from, from.IP), fmt.Sprintf("%s (%s)", r.to, to.IP), verdict(got), verdict(r.allowed), r.why)
		}
		if err := c.Client.Delete(ctx, step.policy); err != nil {
			return "", fmt.Errorf("deleting ClusterNetworkPolicy %s: %w", step.policy.Name, err)
		}
	}
	return s.String(), nil
}
