//go:build linux

package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// KubeletPodPlace returns a Place in the network namespace of a Pod that kubelet runs on node n, for the
// harness's probes: it finds a process of the node's cgroups whose network namespace holds the Pod's address
// and names that namespace <prefix>-<label> (ip netns attach), which teardown removes with the run. The Pod
// must be running with its address in its status.
func (c *Cluster) KubeletPodPlace(ctx context.Context, n *Node, namespace, name, label string) (Place, error) {
	if n.kubelet == nil {
		return Place{}, fmt.Errorf("node %s has no kubelet", n.Name)
	}
	pod := &corev1.Pod{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return Place{}, err
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return Place{}, fmt.Errorf("Pod %s/%s has no address yet: %q", namespace, name, pod.Status.PodIP)
	}
	nodeNS, err := os.Stat(n.NSPath)
	if err != nil {
		return Place{}, err
	}
	seen := map[uint64]bool{}
	for _, pid := range cgroupPids(filepath.Join("/sys/fs/cgroup", "pids", n.kubelet.cgroup)) {
		netns := filepath.Join("/proc", strconv.Itoa(pid), "ns", "net")
		st, err := os.Stat(netns)
		if err != nil || os.SameFile(st, nodeNS) {
			continue
		}
		ino := inode(st)
		if seen[ino] {
			continue
		}
		seen[ino] = true
		out, err := hostcmd.Command("nsenter", "--net="+netns, "ip", "-4", "-o", "addr", "show").CombinedOutput()
		if err != nil || !strings.Contains(string(out), " "+ip.String()+"/") {
			continue
		}
		named := c.Prefix + "-" + label
		if out, err := hostcmd.Command("ip", "netns", "attach", named, strconv.Itoa(pid)).CombinedOutput(); err != nil {
			return Place{}, fmt.Errorf("naming the network namespace of Pod %s/%s: %w: %s", namespace, name, err, out)
		}
		return Place{Label: name, NS: named, IP: ip}, nil
	}
	return Place{}, fmt.Errorf("no process of node %s is in a network namespace with Pod %s/%s's address %s", n.Name, namespace, name, ip)
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
