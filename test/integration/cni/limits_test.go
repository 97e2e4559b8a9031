//go:build linux

package cni_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/cni"
)

// TestLimits makes CNI calls at winnet's limits through the shim against a running agent: a network
// configuration of any size either works or is refused with code 7 naming the limit (never 999);
// container IDs that could escape a path, exceed the limit or name a Windows device are refused with
// code 4; concurrent ADD||ADD, ADD||DEL and DEL||GC on one container leave one address or none, and
// nothing else behind.
func TestLimits(t *testing.T) {
	n := startNode(t, "cni-lim", "192.168.22.11/24", "10.244.10.0/24")
	podArgs := func(name string) string {
		return "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name
	}
	// padded is the node's configuration with an unknown key that brings it to size bytes.
	padded := func(t *testing.T, size int) []byte {
		base := len(n.conf(map[string]any{"padding": ""}))
		if size < base {
			t.Fatalf("size %d is below the configuration's own %d bytes", size, base)
		}
		conf := n.conf(map[string]any{"padding": strings.Repeat("x", size-base)})
		if len(conf) != size {
			t.Fatalf("padded configuration is %d bytes, want %d", len(conf), size)
		}
		return conf
	}

	t.Run("configuration sizes", func(t *testing.T) {
		for _, tc := range []struct {
			size int
			ok   bool
		}{
			{1 << 10, true},
			{800 << 10, true}, // over what the 1 MiB frame of base64 once carried (code 999)
			{1 << 20, true},
			{cni.MaxConfigSize, true},
			{cni.MaxConfigSize + 1, false},
			{32 << 20, false},
		} {
			t.Run(fmt.Sprintf("%d bytes", tc.size), func(t *testing.T) {
				g := NewWithT(t)
				p := n.newPod(t, fmt.Sprintf("lim-size-%d", tc.size), false)
				add := shimCall{command: "ADD", containerID: p.sandbox, netns: p.rt.NetNS, ifName: "eth0", args: podArgs(p.name), stdin: padded(t, tc.size)}
				e := add.run(t)
				if tc.ok {
					g.Expect(e).To(BeNil(), "ADD with a configuration of %d bytes", tc.size)
					del := add
					del.command = "DEL"
					g.Expect(del.run(t)).To(BeNil(), "DEL with a configuration of %d bytes", tc.size)
				} else {
					g.Expect(e).NotTo(BeNil())
					g.Expect(e.Code).To(BeEquivalentTo(cnitypes.ErrInvalidNetworkConfig), "code of %q", e.Error())
					g.Expect(e.Msg).To(ContainSubstring(fmt.Sprintf("limit of %d bytes", cni.MaxConfigSize)))
				}
				g.Expect(n.leftovers(g)).To(BeEmpty())
			})
		}
	})

	t.Run("container IDs and interface names", func(t *testing.T) {
		p := n.newPod(t, "lim-names", false)
		call := func(command, id, ifName, extraArgs string) shimCall {
			return shimCall{command: command, containerID: id, netns: p.rt.NetNS, ifName: ifName, args: podArgs(p.name) + extraArgs, stdin: n.conf(nil)}
		}
		long := strings.Repeat("a", cni.MaxContainerIDLength+1)
		for _, tc := range []struct {
			name string
			call shimCall
			msg  string
		}{
			{"ID with a path separator", call("ADD", "a/../../etc", "eth0", ""), "invalid characters"},
			{"ID ..", call("ADD", "..", "eth0", ""), "invalid characters"},
			{"ID with a backslash", call("ADD", `a\..\x`, "eth0", ""), "invalid characters"},
			{"ID over the length limit", call("ADD", long, "eth0", ""), fmt.Sprintf("limit of %d", cni.MaxContainerIDLength)},
			{"DEL of an ID over the length limit", call("DEL", long, "eth0", ""), fmt.Sprintf("limit of %d", cni.MaxContainerIDLength)},
			{"ID naming a Windows device", call("ADD", "NUL", "eth0", ""), "Windows device name"},
			{"ID naming a Windows device with an extension", call("ADD", "com1.x", "eth0", ""), "Windows device name"},
			{"sandbox ID in CNI_ARGS escaping a path", call("ADD", "lim1", "eth0", ";K8S_POD_INFRA_CONTAINER_ID=../x"), "K8S_POD_INFRA_CONTAINER_ID"},
			{"sandbox ID in CNI_ARGS over the length limit", call("ADD", "lim2", "eth0", ";K8S_POD_INFRA_CONTAINER_ID="+long), "K8S_POD_INFRA_CONTAINER_ID"},
			{"interface name ..", call("ADD", "lim3", "..", ""), "interface name"},
			{"interface name with a separator", call("ADD", "lim4", "a/b", ""), "interface name"},
			{"interface name over 15 bytes", call("ADD", "lim5", "eth0123456789abc", ""), "interface name is too long"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				e := tc.call.run(t)
				g.Expect(e).NotTo(BeNil())
				g.Expect(e.Code).To(BeElementOf(uint(cnitypes.ErrInvalidEnvironmentVariables), uint(cnitypes.ErrInvalidNetworkConfig)), "code of %q", e.Error())
				g.Expect(e.Msg).To(ContainSubstring(tc.msg))
				g.Expect(n.leftovers(g)).To(BeEmpty())
			})
		}
		t.Run("ID at the length limit works", func(t *testing.T) {
			g := NewWithT(t)
			id := strings.Repeat("b", cni.MaxContainerIDLength)
			g.Expect(call("ADD", id, "eth0", ";K8S_POD_INFRA_CONTAINER_ID="+id).run(t)).To(BeNil())
			g.Expect(call("DEL", id, "eth0", ";K8S_POD_INFRA_CONTAINER_ID="+id).run(t)).To(BeNil())
			g.Expect(n.leftovers(g)).To(BeEmpty())
		})
	})

	// race runs a and b at the same time and returns their errors.
	race := func(a, b shimCall, t *testing.T) (ea, eb *cnitypes.Error) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ea = a.run(t) }()
		go func() { defer wg.Done(); eb = b.run(t) }()
		wg.Wait()
		return ea, eb
	}
	const rounds = 8
	// owned lists what the node holds for sandbox: its IPAM allocations, attachment, endpoint and port.
	owned := func(g Gomega, sandbox string) []string {
		var out []string
		for _, l := range n.leftovers(g) {
			if strings.Contains(l, sandbox) || strings.Contains(l, podendpoint.EndpointName(sandbox)) {
				out = append(out, l)
			}
		}
		return out
	}

	t.Run("ADD||ADD on one container: both answer with the same address", func(t *testing.T) {
		g := NewWithT(t)
		for i := range rounds {
			p := n.newPod(t, fmt.Sprintf("lim-aa-%d", i), false)
			add := shimCall{command: "ADD", containerID: p.sandbox, netns: p.rt.NetNS, ifName: "eth0", args: podArgs(p.name), stdin: n.conf(nil)}
			ea, eb := race(add, add, t)
			g.Expect(ea).To(BeNil())
			g.Expect(eb).To(BeNil())
			g.Expect(ipamOf(g, n, p.sandbox)).To(HaveLen(1), "one address for the container")
			del := add
			del.command = "DEL"
			g.Expect(del.run(t)).To(BeNil())
			g.Expect(n.leftovers(g)).To(BeEmpty())
		}
	})

	t.Run("ADD||DEL on one container: all of it or none of it", func(t *testing.T) {
		g := NewWithT(t)
		for i := range rounds {
			p := n.newPod(t, fmt.Sprintf("lim-ad-%d", i), false)
			add := shimCall{command: "ADD", containerID: p.sandbox, netns: p.rt.NetNS, ifName: "eth0", args: podArgs(p.name), stdin: n.conf(nil)}
			del := add
			del.command = "DEL"
			ea, ed := race(add, del, t)
			g.Expect(ea).To(BeNil(), "ADD")
			g.Expect(ed).To(BeNil(), "DEL succeeds whatever it finds")
			held := owned(g, p.sandbox)
			if len(held) > 0 { // DEL ran first: the attachment is whole
				g.Expect(ipamOf(g, n, p.sandbox)).To(HaveLen(1))
				g.Expect(held).To(HaveLen(4), "address, endpoint, port and attachment: %v", held)
			}
			g.Expect(del.run(t)).To(BeNil())
			g.Expect(n.leftovers(g)).To(BeEmpty())
		}
	})

	t.Run("DEL||GC on one container: both succeed, nothing left", func(t *testing.T) {
		g := NewWithT(t)
		for i := range rounds {
			p := n.newPod(t, fmt.Sprintf("lim-dg-%d", i), false)
			add := shimCall{command: "ADD", containerID: p.sandbox, netns: p.rt.NetNS, ifName: "eth0", args: podArgs(p.name), stdin: n.conf(nil)}
			g.Expect(add.run(t)).To(BeNil())
			del := add
			del.command = "DEL"
			valid := []any{}
			if i%2 == 0 { // GC still lists the container half of the time, as a runtime racing its own DEL does
				valid = append(valid, map[string]any{"containerID": p.sandbox, "ifname": "eth0"})
			}
			gc := shimCall{command: "GC", stdin: n.conf(map[string]any{"cni.dev/valid-attachments": valid})}
			ed, eg := race(del, gc, t)
			g.Expect(ed).To(BeNil(), "DEL")
			g.Expect(eg).To(BeNil(), "GC")
			g.Expect(n.leftovers(g)).To(BeEmpty())
		}
	})
}

// ipamOf returns the node's IPAM allocations for a container.
func ipamOf(g Gomega, n *testNode, containerID string) []string {
	allocs, err := n.Agent.Pods.IPAM.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, a := range allocs {
		if a.ContainerID == containerID {
			out = append(out, a.IP.String())
		}
	}
	return out
}
