// Package networkpolicy holds winnet-agent's NetworkPolicy reconciler: it realises the
// networking.k8s.io/v1 NetworkPolicies that select the node's Pods as conjunctive, stateful flows
// in the node's OVS pipeline.
package networkpolicy
