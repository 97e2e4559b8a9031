//go:build linux

package reset_test

import (
	"bytes"
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "reset integration tests", &server, framework.MainOptions{})
}

func takeSnapshot(g Gomega, n *simnode.Node) simnode.Snapshot {
	s, err := n.Snapshot()
	g.Expect(err).NotTo(HaveOccurred())
	return s
}

// TestResetGivesTheNodeItsNetworkBack converges a node network, runs a Pod on it, stops the agent
// without deleting the WindowsNodeNetwork and stops the API server, and resets the node offline: a
// dry run first, then the reset, then again; then the runtime deletes the leftover Pod through
// containerd's go-cni and the shim with no agent, and the node is as it was before winnet.
func TestResetGivesTheNodeItsNetworkBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const name = "win-r"
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.10.0/24"))
	n := underlay.AddNode(t, name, netip.MustParsePrefix("192.168.10.21/24"), simnode.NodeOptions{StartOVS: true})
	before := takeSnapshot(g, n)
	g.Expect(before.UplinkAddrs).To(ContainSubstring("192.168.10.21/24"))
	g.Expect(before.Bridges).To(BeEmpty())

	shim := framework.InstallShim(t)
	pn := framework.StartPodNodeOn(t, server, n, "10.244.3.0/24", 30*time.Second, framework.PodNodeOptions{
		Agent: framework.AgentOptions{CNIShimPath: shim},
		Spec: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.ServiceCIDRs = []networkv1alpha1.CIDR{"10.96.0.0/12"}
		},
	})
	a := pn.Agent
	record := nodenetwork.AdapterRecordFile(a.StateDir, simnode.UplinkName)
	conflist := filepath.Join(a.CNIConfDir, cni.ConfListName)
	g.Expect(record).To(BeAnExistingFile())

	// A Pod runs on the node.
	runtime := framework.NewRuntimeWithBinDir(t, a.CNIConfDir, filepath.Dir(shim))
	pod := framework.RuntimePod{Namespace: "default", Name: "leftover", Sandbox: "leftover-sandbox" + strings.Repeat("0", 48),
		Netns: "/run/netns/" + n.NS + "-leftover"}
	_, err := simnode.Exec("", "ip", "netns", "add", filepath.Base(pod.Netns))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", filepath.Base(pod.Netns)) })
	g.Expect(runtime.Setup(ctx, pod)).To(Succeed())
	g.Expect(hns.StartSandbox(a.SandboxDir, pod.Netns)).To(Succeed())
	t.Cleanup(func() { _ = hns.StopSandbox(a.SandboxDir, pod.Netns) })

	// The agent goes away; its WindowsNodeNetwork and the node network stay. Then the API server
	// stops: the reset needs neither.
	a.Stop()
	g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: name}, &networkv1alpha1.WindowsNodeNetwork{})).To(Succeed())
	t.Cleanup(func() {
		// With no agent left to remove its finalizer, the object goes as an administrator would
		// remove it after a reset.
		w := &networkv1alpha1.WindowsNodeNetwork{}
		if server.Client.Get(context.Background(), client.ObjectKey{Name: name}, w) == nil {
			w.Finalizers = nil
			_ = server.Client.Update(context.Background(), w)
			_ = server.Client.Delete(context.Background(), w)
		}
	})
	g.Expect(server.Env.ControlPlane.APIServer.Stop()).To(Succeed())
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: n.OVS.DBSocket()})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(db.Close)
	host := agent.ResetHost{OVSDB: db, HNS: a.HNS, Net: a.Net}
	opts := agent.ResetOptions{StateDir: a.StateDir, CNIConfDir: a.CNIConfDir, CNIShimPath: shim}
	converged := takeSnapshot(g, n)
	g.Expect(converged.Bridges).To(ContainSubstring("br-int"))
	g.Expect(converged.UplinkAddrs).NotTo(ContainSubstring("192.168.10.21"))

	t.Run("a dry run lists the steps and changes nothing", func(t *testing.T) {
		g := NewWithT(t)
		var out bytes.Buffer
		dry := opts
		dry.DryRun, dry.Out = true, &out
		steps, err := agent.Reset(ctx, host, dry)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(steps).To(ContainElements(
			`would remove: OVS bridge br-int (uplink "uplink0")`,
			"would release: adapter uplink0 from the virtual switch",
			HavePrefix("would remove: HNS network winnet "),
			"would check: adapter uplink0 gets 192.168.10.21 back, re-applying its recorded IP configuration if not",
			"would remove: adapter record "+record,
			"would keep: "+conflist+" while 1 sandboxes are left: the shim answers their DEL and removes it with the last",
			"would keep: "+shim+" while 1 sandboxes are left: it answers their DEL and removes itself with the last",
		))
		g.Expect(steps).NotTo(ContainElement("would remove: " + conflist))
		g.Expect(out.String()).To(Equal(strings.Join(steps, "\n") + "\n"))
		g.Expect(takeSnapshot(g, n)).To(Equal(converged))
		_, err = a.HNS.GetNetworkByName(ctx, agent.DefaultHNSNetwork)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(record).To(BeAnExistingFile())
		g.Expect(conflist).To(BeAnExistingFile())
	})

	t.Run("reset removes everything and restores the uplink", func(t *testing.T) {
		g := NewWithT(t)
		var out bytes.Buffer
		o := opts
		o.Out = &out
		steps, err := agent.Reset(ctx, host, o)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(steps).To(ContainElements(
			`removed: OVS bridge br-int (uplink "uplink0")`,
			"released: adapter uplink0 from the virtual switch",
			HavePrefix("removed: HNS network winnet "),
			"removed: adapter record "+record,
			"kept: "+conflist+" while 1 sandboxes are left: the shim answers their DEL and removes it with the last",
			"kept: "+shim+" while 1 sandboxes are left: it answers their DEL and removes itself with the last",
			"removed: "+filepath.Join(a.StateDir, "pods"),
		))
		g.Expect(out.String()).To(Equal(strings.Join(steps, "\n") + "\n"))
		after := takeSnapshot(g, n)
		g.Expect(after).To(Equal(before), "the node is as it was before the agent converged it")
		_, err = a.HNS.GetNetworkByName(ctx, agent.DefaultHNSNetwork)
		g.Expect(err).To(MatchError(hns.ErrNotFound))
		for _, link := range []string{"br-int", hns.LinuxManagementVNICName(simnode.UplinkName), "winnet-gw0"} {
			_, err := n.Exec("ip", "link", "show", link)
			g.Expect(err).To(HaveOccurred(), "link %s is gone", link)
		}
		g.Expect(record).NotTo(BeAnExistingFile())
		g.Expect(conflist).To(BeAnExistingFile(), "a sandbox is left: without the conflist containerd would fail its DEL")
		g.Expect(shim).To(BeAnExistingFile(), "a sandbox is left: its DEL runs the shim")
		g.Expect(filepath.Join(a.StateDir, "pods")).NotTo(BeADirectory())
		g.Expect(filepath.Join(a.StateDir, "ipam")).NotTo(BeADirectory())
		g.Expect(n.MustExec(t, "ip", "route", "show", "default")).To(ContainSubstring("via 192.168.10.1 dev uplink0"))
	})

	t.Run("a second reset is a no-op", func(t *testing.T) {
		g := NewWithT(t)
		var out bytes.Buffer
		o := opts
		o.Out = &out
		steps, err := agent.Reset(ctx, host, o)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(steps).To(BeEmpty())
		g.Expect(out.String()).To(HavePrefix("nothing to remove"))
		g.Expect(takeSnapshot(g, n)).To(Equal(before))
		g.Expect(conflist).To(BeAnExistingFile())
	})

	t.Run("DEL of the leftover Pod succeeds with no agent and takes the conflist and the installed shim", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hns.StopSandbox(a.SandboxDir, pod.Netns)).To(Succeed())
		g.Expect(runtime.Remove(ctx, pod)).To(Succeed())
		g.Expect(conflist).NotTo(BeAnExistingFile())
		g.Expect(shim).NotTo(BeAnExistingFile(), "the shim winnet installed goes with the last sandbox")
		g.Expect(filepath.Join(framework.BuildShim(t), cni.PluginType)).To(BeAnExistingFile(), "the build output the other tests run is not the agent's to remove")
		files, err := simnode.Files(a.StateDir, a.CNIConfDir, filepath.Dir(shim))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(files).To(BeEmpty(), "the node holds no file of winnet's")
		g.Expect(takeSnapshot(g, n)).To(Equal(before))
		steps, err := agent.Reset(ctx, host, opts)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(steps).To(BeEmpty(), "nothing is left to reset")
	})
}
