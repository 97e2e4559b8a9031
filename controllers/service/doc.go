// Package service holds winnet-agent's Service reconciler: it load-balances ClusterIP and NodePort
// Services to their endpoints in the node's OVS pipeline (select groups and DNAT in conntrack), in
// place of kube-proxy, which cannot serve a winnet node.
package service
