package ipam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/gomega"
)

// hostLocalPlugin runs this machine's real host-local plugin on the allocator's data directory, as
// the runtime or an agent of an earlier version does.
type hostLocalPlugin struct {
	path string
	conf []byte
}

func newHostLocalPlugin(t *testing.T, dataDir string, subnet netip.Prefix) hostLocalPlugin {
	t.Helper()
	path, err := invoke.FindInPath(Plugin, []string{"/opt/cni/bin", "/usr/lib/cni"})
	if err != nil {
		t.Fatalf("this test runs the real host-local plugin (hack/setup-test-deps.sh installs it): %v", err)
	}
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": ipamNetwork,
		"ipam": map[string]any{"type": Plugin, "dataDir": dataDir, "ranges": [][]map[string]string{{{"subnet": subnet.String()}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return hostLocalPlugin{path: path, conf: conf}
}

func (h hostLocalPlugin) args(command, id string) *invoke.Args {
	return &invoke.Args{Command: command, ContainerID: id, NetNS: "/run/netns/none", IfName: "eth0", Path: "/usr/lib/cni"}
}

func (h hostLocalPlugin) add(ctx context.Context, id string) (netip.Addr, error) {
	res, err := invoke.ExecPluginWithResult(ctx, h.path, h.conf, h.args("ADD", id), nil)
	if err != nil {
		return netip.Addr{}, err
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return netip.Addr{}, err
	}
	a, _ := netip.AddrFromSlice(cur.IPs[0].Address.IP.To4())
	return a, nil
}

func (h hostLocalPlugin) del(ctx context.Context, id string) error {
	return invoke.ExecPluginWithoutResult(ctx, h.path, h.conf, h.args("DEL", id), nil)
}

// The agent's allocator and the host-local plugin share one data directory both ways: each
// continues the other's round robin, lists and releases the other's allocations.
func TestIPAMSharesHostLocalsDirectory(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ipam := newTestIPAM(t)
	subnet := netip.MustParsePrefix("10.244.9.0/28")
	plugin := newHostLocalPlugin(t, ipam.dataDir, subnet)
	req := func(id string) Request { return Request{ContainerID: id, IfName: "eth0", Subnet: subnet} }

	// Round robin continues across both, even over addresses released meanwhile.
	a, err := ipam.Allocate(ctx, req("agent-0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Addr()).To(Equal(netip.MustParseAddr("10.244.9.2")))
	g.Expect(ipam.Release(ctx, Request{ContainerID: "agent-0", IfName: "eth0"})).To(Succeed())
	p, err := plugin.add(ctx, "plugin-0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(netip.MustParseAddr("10.244.9.3")), "host-local continues after the agent's last address")
	g.Expect(plugin.del(ctx, "plugin-0")).To(Succeed())
	a, err = ipam.Allocate(ctx, req("agent-1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Addr()).To(Equal(netip.MustParseAddr("10.244.9.4")), "the agent continues after host-local's last address")
	p, err = plugin.add(ctx, "plugin-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(netip.MustParseAddr("10.244.9.5")))
	a, err = ipam.Allocate(ctx, req("agent-2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Addr()).To(Equal(netip.MustParseAddr("10.244.9.6")))

	allocs, err := ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(ConsistOf(
		Allocation{IP: netip.MustParseAddr("10.244.9.4"), ContainerID: "agent-1", IfName: "eth0"},
		Allocation{IP: netip.MustParseAddr("10.244.9.5"), ContainerID: "plugin-1", IfName: "eth0"},
		Allocation{IP: netip.MustParseAddr("10.244.9.6"), ContainerID: "agent-2", IfName: "eth0"}))

	// Each releases the other's allocation; host-local refuses a second allocation for a container
	// that holds one, so its ADD after the agent's release proves the release.
	g.Expect(ipam.Release(ctx, Request{ContainerID: "plugin-1", IfName: "eth0"})).To(Succeed())
	g.Expect(plugin.del(ctx, "agent-1")).To(Succeed())
	allocs, err = ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(ConsistOf(Allocation{IP: netip.MustParseAddr("10.244.9.6"), ContainerID: "agent-2", IfName: "eth0"}))
	_, err = plugin.add(ctx, "plugin-1")
	g.Expect(err).NotTo(HaveOccurred())

	// At once, the agent's calls and host-local processes hand out every free address exactly once.
	type result struct {
		id   string
		addr netip.Addr
		err  error
	}
	results := make(chan result, 10)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			id := fmt.Sprintf("agent-c%d", i)
			a, err := ipam.Allocate(ctx, req(id))
			results <- result{id, a.Addr(), err}
		})
		wg.Go(func() {
			id := fmt.Sprintf("plugin-c%d", i)
			a, err := plugin.add(ctx, id)
			results <- result{id, a, err}
		})
	}
	wg.Wait()
	close(results)
	seen := map[netip.Addr]string{}
	for r := range results {
		g.Expect(r.err).NotTo(HaveOccurred(), r.id)
		g.Expect(seen).NotTo(HaveKey(r.addr), r.id)
		seen[r.addr] = r.id
	}
	// 13 addresses in the /28 (.2-.14): 2 held before, 10 handed out now.
	allocs, err = ipam.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(HaveLen(12))
	for _, al := range allocs {
		if id, ok := seen[al.IP]; ok {
			g.Expect(al.ContainerID).To(Equal(id))
		}
	}
}
