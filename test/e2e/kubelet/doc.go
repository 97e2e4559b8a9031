// Package kubelet runs winnet nodes with a real kubelet and containerd (test/e2e/cluster AddKubeletNode):
// Pods created through the API are scheduled by kube-scheduler, started by kubelet through containerd,
// which runs winnet's conflist, probed Ready by kubelet and reached with kubectl exec and logs, across
// nodes and through a Service. One node runs Debian's containerd 1.6, the other containerd 2.x. The
// cluster is dual-stack (cluster.Options.DualStack): dualstack_test.go checks what winnet does there,
// with a flannel node and the cluster DNS beside the kubelet nodes.
package kubelet
