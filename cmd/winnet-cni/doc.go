// Command winnet-cni is the CNI plugin binary that kubelet and containerd run; it forwards every CNI command to the winnet agent on the same node.
package main
