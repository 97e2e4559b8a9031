//go:build linux

package preflight_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/internal/preflight"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "preflight integration tests", &server, framework.MainOptions{})
}

// TestBeforeInstall gathers the facts of a simulated node that winnet has not touched (its OVS
// running, no HNS network, no conflist, no directories, the Node's InternalIP on the uplink) and
// every check passes or does not apply; then the uplink is made unfit on the node itself, with
// netlink: a second adapter holding the address, the address on none, a small MTU; and a DHCP lease
// is read as DHCP.
func TestBeforeInstall(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.11.0/24"))
	n := underlay.AddNode(t, "win-p", netip.MustParsePrefix("192.168.11.21/24"), simnode.NodeOptions{StartOVS: true})

	// The Node, as kubelet registers it.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-p"}}
	g.Expect(server.Client.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), node) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.11.21"}}
	node.Status.NodeInfo.ContainerRuntimeVersion = "containerd://2.4.2"
	g.Expect(server.Client.Status().Update(ctx, node)).To(Succeed())

	dir := t.TempDir()
	opts := preflight.Options{
		NodeName: "win-p", HNSNetwork: "winnet", Bridge: "br-int",
		StateDir: filepath.Join(dir, "state"), CNIConfDir: filepath.Join(dir, "net.d"), AuditLogDir: filepath.Join(dir, "audit"),
		OVSDBAddress: n.OVS.DBSocket(), OVSRunDir: n.OVS.Dir, NetNSPath: n.NSPath,
		Reader: server.Client, ServerTime: preflight.APIServerTime(server.Config, nil),
	}
	run := func() (map[string]preflight.Result, preflight.Report) {
		rep := preflight.Run(ctx, preflight.Checks(), preflight.Gather(ctx, opts))
		m := map[string]preflight.Result{}
		for _, r := range rep.Results {
			t.Logf("%-4s %-17s %s [%s] %s", r.Status, r.Name, r.Detail, r.Source, r.Fix)
			m[r.Name] = r
		}
		return m, rep
	}

	got, rep := run()
	g.Expect(rep.ExitCode()).To(Equal(0), rep.Summary())
	g.Expect(rep.Summary()).To(Equal("10 passed, 0 warnings, 0 failed, 3 not checked on this platform"))
	g.Expect(got["hns"].Detail).To(Equal("HNS 9.2 answered; no winnet network yet"))
	g.Expect(got["ovs-extension"].Detail).To(HavePrefix("no winnet network yet"))
	g.Expect(got["ovs-version"].Detail).To(MatchRegexp(`^Open vSwitch 3\.\d+\.\d+$`))
	g.Expect(got["containerd"].Detail).To(Equal("containerd 2.4.2 (the Node's status.nodeInfo)"))
	g.Expect(got["cni-config"].Detail).To(ContainSubstring("holds no configuration yet"))
	g.Expect(got["uplink"].Detail).To(Equal("192.168.11.21 on uplink0 (static), MTU 1500"))
	g.Expect(got["directories"].Detail).To(And(ContainSubstring("state directory "+opts.StateDir+" absent"),
		ContainSubstring("audit log directory "+opts.AuditLogDir+" absent")))

	ip := func(args ...string) {
		t.Helper()
		out, err := simnode.Exec(n.NS, append([]string{"ip"}, args...)...)
		g.Expect(err).NotTo(HaveOccurred(), out)
	}
	// A DHCP lease (a finite lifetime) is DHCP.
	ip("addr", "change", "192.168.11.21/24", "dev", "uplink0", "valid_lft", "3600", "preferred_lft", "3600")
	got, _ = run()
	g.Expect(got["uplink"]).To(HaveField("Detail", "192.168.11.21 on uplink0 (DHCP), MTU 1500"))

	// A second adapter holding the Node's address.
	ip("link", "add", "dup0", "type", "veth", "peer", "name", "dup1")
	ip("addr", "add", "192.168.11.21/24", "dev", "dup0")
	got, rep = run()
	g.Expect(got["uplink"]).To(And(HaveField("Status", preflight.Fail), HaveField("Detail", "2 adapters hold the Node's InternalIP 192.168.11.21: uplink0, dup0")))
	g.Expect(rep.ExitCode()).To(Equal(2))
	ip("link", "del", "dup0")

	// A small MTU.
	ip("link", "set", "uplink0", "mtu", "1400")
	got, rep = run()
	g.Expect(got["uplink"]).To(HaveField("Status", preflight.Warn))
	g.Expect(rep.ExitCode()).To(Equal(1))
	ip("link", "set", "uplink0", "mtu", "1500")

	// The address on no adapter.
	ip("addr", "del", "192.168.11.21/24", "dev", "uplink0")
	got, _ = run()
	g.Expect(got["uplink"]).To(And(HaveField("Status", preflight.Fail), HaveField("Detail", "no adapter holds the Node's InternalIP 192.168.11.21")))
}
