//go:build linux

package remoteroute_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/simnode"
)

// runAgent runs winnet-agent for the simulated node as cmd/winnet-agent wires it (node network,
// remote routes, Pods; the HNS simulator keeps its state in stateDir, as HNS keeps its state across
// agent restarts) until the returned stop is called. Stopping leaves the host as it is, as a
// restarted agent finds it.
func runAgent(t *testing.T, n *simnode.Node, stateDir string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := agent.NewManager(server.Config, agent.Options{
		NodeName: n.Name, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SeveralAgentsPerProcess: true,
	})
	if err == nil {
		_, err = agent.SetupNodeNetwork(ctx, mgr, n.Name, agent.HostOptions{
			OVSDBAddress: n.OVS.DBSocket(), OVSRunDir: n.OVS.Dir, NetNSPath: n.NSPath, StateDir: stateDir,
			CNISocket: filepath.Join(stateDir, "cni.sock"), CNIConfDir: filepath.Join(stateDir, "net.d"),
		})
	}
	if err != nil {
		cancel()
		t.Fatalf("starting the agent of %s: %v", n.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the agent of %s stopped: %v", n.Name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// flowRound is the round the bridge records for its flows' cookies.
func flowRound(g Gomega, n *node) uint16 {
	out, err := n.OVS.Vsctl("get", "bridge", "br-int", "external_ids:"+openflow.RoundExternalID)
	g.Expect(err).NotTo(HaveOccurred(), out)
	round, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(out), `"`), 10, 16)
	g.Expect(err).NotTo(HaveOccurred())
	return uint16(round)
}

// flowsOfRound returns the bridge's flows whose cookies carry round.
func flowsOfRound(g Gomega, n *node, round uint16) []string {
	lines, err := n.OVS.DumpFlows("br-int", fmt.Sprintf("cookie=%#x/%#x", openflow.MakeCookie(round, 0, 0), openflow.RoundMask))
	g.Expect(err).NotTo(HaveOccurred())
	return lines
}

func tunnelRoute(name, cidr, nodeIP string) *networkv1alpha1.RemoteSubnetRoute {
	return &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{
			PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(cidr)}, NodeIP: networkv1alpha1.IPAddress(nodeIP), Mode: networkv1alpha1.RouteModeTunnel,
		},
	}
}

// TestAgentRestartRemovesPreviousRound stops the agent, deletes a route and leaves a stray flow of the
// agent's round on the switch while it is down, and starts a new agent on the same OVS: once the node
// network, the routes and the Pods have installed their flows in the new round, the flows of the
// previous round are gone — the deleted route's and the stray one — and the wanted flows are there.
func TestAgentRestartRemovesPreviousRound(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.21.0/24"))
	n := &node{Node: underlay.AddNode(t, "rt-r", netip.MustParsePrefix("192.168.21.11/24"), simnode.NodeOptions{StartOVS: true}),
		name: "rt-r", podCIDR: "10.244.11.0/24", gateway: netip.MustParseAddr("10.244.11.1")}
	stateDir := t.TempDir()
	stop := runAgent(t, n.Node, stateDir)
	createNode(t, g, n)
	kept, gone := tunnelRoute("rt-r-kept", "10.244.12.0/24", "192.168.21.12"), tunnelRoute("rt-r-gone", "10.244.13.0/24", "192.168.21.13")
	for _, rsr := range []*networkv1alpha1.RemoteSubnetRoute{kept, gone} {
		g.Expect(server.Client.Create(ctx, rsr)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), rsr) })
	}
	g.Eventually(routesReady(n.name, 2)).WithTimeout(timeout).Should(Succeed())
	g.Expect(n.flows(g)).To(And(ContainSubstring("nw_dst=10.244.12.0/24"), ContainSubstring("nw_dst=10.244.13.0/24")))
	oldRound := flowRound(g, n)
	g.Expect(flowsOfRound(g, n, oldRound)).To(HaveLen(len(strings.Split(n.flows(g), "\n"))), "every flow is in the agent's round")

	stop()
	g.Expect(server.Client.Delete(ctx, gone)).To(Succeed())
	stray := fmt.Sprintf("cookie=%#x,table=%d,priority=5,ip,nw_dst=10.99.0.0/16,actions=drop",
		openflow.MakeCookie(oldRound, pipeline.CategoryRoute, 0x123), pipeline.L3ForwardingTable)
	n.OVS.MustOfctl(t, "add-flow", "br-int", stray)
	g.Expect(n.flows(g)).To(ContainSubstring("nw_dst=10.99.0.0/16"))

	restarted := time.Now()
	runAgent(t, n.Node, stateDir)
	t.Cleanup(func() { deleteNodeNetwork(t, n.name) }) // while the new agent runs: it restores the host
	g.Eventually(func(g Gomega) {
		g.Expect(flowsOfRound(g, n, oldRound)).To(BeEmpty(), "flows of the previous agent's round")
	}).WithTimeout(timeout).Should(Succeed())
	t.Logf("the previous round's flows were gone %v after the agent started", time.Since(restarted).Round(time.Millisecond))
	g.Expect(flowRound(g, n)).To(Equal(oldRound + 1))
	flows := n.flows(g)
	g.Expect(flows).To(ContainSubstring("nw_dst=10.244.12.0/24"), "the kept route's flows")
	g.Expect(flows).NotTo(ContainSubstring("nw_dst=10.244.13.0/24"), "the deleted route's flows")
	g.Expect(flows).NotTo(ContainSubstring("nw_dst=10.99.0.0/16"), "the stray flow")
	g.Expect(flowsOfRound(g, n, oldRound+1)).To(HaveLen(len(strings.Split(flows, "\n"))), "every flow is in the new round")
	g.Eventually(routesReady(n.name, 1)).WithTimeout(timeout).Should(Succeed())
}

// deleteNodeNetwork deletes the node's WindowsNodeNetwork and waits until its agent has restored the
// host and released it.
func deleteNodeNetwork(t *testing.T, name string) {
	key := client.ObjectKey{Name: name}
	_ = server.Client.Delete(context.Background(), &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if server.Client.Get(context.Background(), key, &networkv1alpha1.WindowsNodeNetwork{}) != nil {
			return
		}
	}
	t.Errorf("WindowsNodeNetwork %s was not released within 10s", name)
}
