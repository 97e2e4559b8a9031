// Package kubelet runs winnet nodes with a real kubelet and containerd (test/e2e/cluster AddKubeletNode):
// Pods created through the API are scheduled by kube-scheduler, started by kubelet through containerd,
// which runs winnet's conflist, probed Ready by kubelet and reached with kubectl exec and logs, across
// nodes and through a Service. One node runs Debian's containerd 1.6, the other containerd 2.x.
package kubelet
