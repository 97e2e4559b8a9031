// Package flannel tests winnet joining a flannel cluster: two simulated winnet nodes and a Linux node that runs
// the real flanneld (VXLAN, kube subnet manager), with real packets between their Pods and hosts.
package flannel
