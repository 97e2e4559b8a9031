//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"golang.org/x/sys/unix"
)

// One cluster for the whole package: three nodes (node-a, node-b, node-c) with two Pods on node-a and one on
// each other node when the agents serve CNI, and CoreDNS as kube-dns on node-a. Every test leaves the cluster as it found it.
var (
	c    *cluster.Cluster
	pods = map[string]*cluster.Pod{}
)

var nodeSpecs = []cluster.NodeSpec{
	{Name: "node-a", IP: netip.MustParseAddr("192.168.77.11"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24")},
	{Name: "node-b", IP: netip.MustParseAddr("192.168.77.12"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
	{Name: "node-c", IP: netip.MustParseAddr("192.168.77.13"), PodCIDR: netip.MustParsePrefix("10.244.3.0/24")},
}

// podSpecs place the Pods: name -> node.
var podSpecs = [][2]string{{"pod-a1", "node-a"}, {"pod-a2", "node-a"}, {"pod-b1", "node-b"}, {"pod-c1", "node-c"}}

const (
	readyTimeout = 60 * time.Second
	converge     = 30 * time.Second
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(runWithCluster(m))
}

// runWithCluster builds the cluster, runs the tests and tears the cluster down; a cluster that cannot be built
// fails the run with the reason and the logs.
func runWithCluster(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	var err error
	c, err = cluster.Start(ctx, cluster.Options{Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "e2e: "+f+"\n", a...) }})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the e2e tests need a cluster on this machine: %v\n", err)
		return 1
	}
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "tearing the e2e cluster down: %v\n", err)
		}
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the e2e cluster: %v\n%s", err, c.LogTails(40))
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster of %d nodes and %d Pods up in %v\n", len(c.Nodes()), len(pods), time.Since(start).Round(time.Millisecond))
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s", c.LogTails(60))
	}
	return code
}

func setUp(ctx context.Context) error {
	for _, spec := range nodeSpecs {
		spec.AgentArgs = append(spec.AgentArgs, agentLeaseArgs()...)
		if _, err := c.AddNode(ctx, spec); err != nil {
			return err
		}
	}
	if err := c.WaitReady(ctx, readyTimeout); err != nil {
		return err
	}
	for _, ps := range podSpecs {
		p, err := c.AddPod(ctx, c.Node(ps[1]), ps[0], readyTimeout)
		if err != nil {
			return err
		}
		pods[ps[0]] = p
	}
	// The cluster DNS, on node-a (no test reboots it or deletes its network).
	_, err := c.StartDNS(ctx, node("node-a"), readyTimeout)
	return err
}

func node(name string) *cluster.Node { return c.Node(name) }

// encapsulation is one setting of every node's encapsulation the matrix runs under.
type encapsulation struct {
	name string
	spec networkv1alpha1.EncapsulationSpec
	// tunnelType is the OVS interface type of the tunnel port, empty when there is none to check.
	tunnelType string
	// flow is a flow fragment the setting must show on node-a, as ovs-ofctl prints it.
	flow string
}

var encapsulations = []encapsulation{
	{name: "vxlan", spec: networkv1alpha1.EncapsulationSpec{TunnelType: networkv1alpha1.TunnelTypeVXLAN}, tunnelType: "vxlan",
		flow: "set_field:192.168.77.12->tun_dst"},
	{name: "geneve", spec: networkv1alpha1.EncapsulationSpec{TunnelType: networkv1alpha1.TunnelTypeGeneve}, tunnelType: "geneve",
		flow: "set_field:192.168.77.12->tun_dst"},
	{name: "noencap", spec: networkv1alpha1.EncapsulationSpec{Mode: networkv1alpha1.EncapsulationModeNoEncap}},
	{name: "vxlan vni 4096:4789", spec: networkv1alpha1.EncapsulationSpec{TunnelType: networkv1alpha1.TunnelTypeVXLAN, VNI: 4096, Port: 4789},
		tunnelType: "vxlan", flow: "set_field:0x1000->tun_id"},
}

// setEncapsulation gives every node the encapsulation and waits until every node realised it.
func setEncapsulation(t *testing.T, e encapsulation) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	for _, n := range c.Nodes() {
		g.Expect(c.UpdateNetwork(ctx, n.Name, func(w *networkv1alpha1.WindowsNodeNetwork) {
			w.Spec.Encapsulation = e.spec
		})).To(Succeed())
	}
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
	for _, n := range c.Nodes() {
		g.Eventually(func(g Gomega) {
			out, err := n.OVS.Vsctl("--if-exists", "get", "interface", cluster.TunnelName, "type")
			g.Expect(err).NotTo(HaveOccurred())
			if e.tunnelType != "" {
				g.Expect(strings.TrimSpace(out)).To(Equal(e.tunnelType), "tunnel port type on %s", n.Name)
			}
		}).WithTimeout(converge).Should(Succeed())
	}
	if e.flow != "" {
		g.Eventually(node("node-a").Flows).WithTimeout(converge).Should(ContainSubstring(e.flow))
	} else {
		g.Eventually(node("node-a").Flows).WithTimeout(converge).ShouldNot(ContainSubstring("tun_dst"))
	}
}

// matrixChecks are the rows of the connectivity matrix under one encapsulation; the local and SNAT rows,
// which no encapsulation touches, only with the first.
func matrixChecks(e encapsulation, first bool) []cluster.Check {
	a, b, cc := node("node-a"), node("node-b"), node("node-c")
	path := e.name
	// The host reaches Pod CIDRs through its gateway interface, so it sources from the gateway address;
	// remote ones routed without encapsulation go out on the bridge with its node IP.
	hostSource := a.Gateway
	if e.spec.Mode == networkv1alpha1.EncapsulationModeNoEncap {
		hostSource = a.IP
	}
	checks := []cluster.Check{
		{From: a.GatewayPlace(), To: b.GatewayPlace(), Path: path},
		{From: b.GatewayPlace(), To: cc.GatewayPlace(), Path: path},
		{From: a.Host(), To: b.GatewayPlace(), Path: path, WantSource: hostSource},
	}
	if first {
		checks = append(checks,
			cluster.Check{From: a.Host(), To: c.ExternalPlace(), Path: "underlay"},
			cluster.Check{From: c.ExternalPlace(), To: b.Host(), Path: "underlay"},
			cluster.Check{From: a.Host(), To: b.Host(), Path: "underlay"},
		)
	}
	a1, a2, b1, c1 := pods["pod-a1"].Place(), pods["pod-a2"].Place(), pods["pod-b1"].Place(), pods["pod-c1"].Place()
	checks = append(checks,
		cluster.Check{From: a1, To: b1, Path: path},
		cluster.Check{From: b1, To: a2, Path: path},
		cluster.Check{From: c1, To: a1, Path: path},
		cluster.Check{From: a.Host(), To: b1, Path: path + ", node to remote Pod", WantSource: hostSource},
	)
	if first {
		checks = append(checks,
			cluster.Check{From: a1, To: a2, Path: "same node"},
			cluster.Check{From: a.Host(), To: a1, Path: "node to local Pod", WantSource: a.Gateway},
			cluster.Check{From: a1, To: c.ExternalPlace(), Path: "external, SNAT", WantSource: a.IP},
			cluster.Check{From: b1, To: c.ExternalPlace(), Path: "external, SNAT", WantSource: b.IP},
			cluster.Check{From: a1, To: c.ExcludedPlace(), Path: "external, excluded from SNAT"},
		)
	}
	return checks
}

// matrixAttempts is how many times the matrix tries every row; every attempt counts.
const matrixAttempts = 3

// TestConnectivityMatrix sends ICMP and TCP along every row of the matrix under each encapsulation,
// matrixAttempts times once every row passed once (the first packets to a new tunnel peer are dropped while
// ovs-vswitchd resolves its MAC: how long that took and how many tries failed is logged), prints the table
// with every attempt's failures and fails on any row where one echo request or TCP exchange failed in any
// attempt.
func TestConnectivityMatrix(t *testing.T) {
	ctx := context.Background()
	var all []cluster.Result
	var switchEvents []string
	for i, e := range encapsulations {
		setEncapsulation(t, e)
		checks := matrixChecks(e, i == 0)
		took, failed, err := c.WaitReachable(ctx, checks, converge)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		t.Logf("%s: every row reachable %v after the change was realised (%d tries failed meanwhile%s)", e.name, took.Round(time.Millisecond), len(failed), cluster.Lines(failed))
		probing := time.Now()
		all = append(all, c.Probe(ctx, checks, matrixAttempts)...)
		switchEvents = append(switchEvents, c.SwitchEvents(probing)...)
	}
	setEncapsulation(t, encapsulations[0])
	t.Logf("connectivity matrix (%d attempts per row, all counted):\n%s", matrixAttempts, cluster.FormatTable(all))
	for _, r := range all {
		if !r.OK() {
			t.Errorf("%s -> %s over %s does not pass in every attempt (ICMP %d/%d %v; TCP %d/%d from the wanted source %v, %v)",
				r.From, r.To, r.Path, r.ICMPReceived, r.ICMPSent, r.ICMPErr, r.TCPOKAttempts, len(r.Attempts), r.WantSource, r.TCPErr)
		}
	}
	if t.Failed() {
		t.Logf("ports added or deleted, warnings and errors in the switches while the rows were probed (%d)%s", len(switchEvents), cluster.Lines(switchEvents))
	}
}

// expectAllOK waits until every check passed once (the data plane converging after a fault), then probes
// them attempts times, every attempt counting, logs the table and fails on any check that lost a packet.
func expectAllOK(t *testing.T, what string, checks []cluster.Check, attempts int) {
	t.Helper()
	ctx := context.Background()
	took, failed, err := c.WaitReachable(ctx, checks, converge)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	probing := time.Now()
	results := c.Probe(ctx, checks, attempts)
	t.Logf("%s; every path reachable %v later (%d tries failed meanwhile%s), then %d attempts each:\n%s", what,
		took.Round(time.Millisecond), len(failed), cluster.Lines(failed), attempts, cluster.FormatTable(results))
	lost := false
	for _, r := range results {
		if !r.OK() {
			lost = true
			t.Errorf("%s -> %s over %s does not pass in every attempt (ICMP %d/%d %v; TCP %d/%d, %v)",
				r.From, r.To, r.Path, r.ICMPReceived, r.ICMPSent, r.ICMPErr, r.TCPOKAttempts, len(r.Attempts), r.TCPErr)
		}
	}
	if lost {
		events := c.SwitchEvents(probing)
		t.Logf("ports added or deleted, warnings and errors in the switches while the paths were probed (%d)%s", len(events), cluster.Lines(events))
	}
}

// steadyPath is the path the dynamic scenarios keep traffic on: Pod to Pod across nodes.
func steadyPath() (from cluster.Place, to netip.Addr) {
	return pods["pod-a1"].Place(), pods["pod-b1"].IP
}

func startSteadyPing(t *testing.T) *cluster.SteadyPing {
	t.Helper()
	from, to := steadyPath()
	NewWithT(t).Eventually(func() int {
		_, received, _ := cluster.Ping(from, to, 1)
		return received
	}).WithTimeout(converge).Should(Equal(1), "the path %s -> %s must work before the scenario", from, to)
	p, err := cluster.StartSteadyPing(from, to, 20*time.Millisecond)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	time.Sleep(500 * time.Millisecond)
	return p
}

// TestTunnelTypeChangeLive switches every node from VXLAN to Geneve and back with traffic running: the path is
// back within 5 s of each change.
func TestTunnelTypeChangeLive(t *testing.T) {
	g := NewWithT(t)
	for _, e := range []encapsulation{encapsulations[1], encapsulations[0]} {
		ping := startSteadyPing(t)
		start := time.Now()
		setEncapsulation(t, e) // every node's spec updated, realised (Ready, tunnel port type, flows)
		realised := time.Since(start)
		time.Sleep(2 * time.Second)
		stats, err := ping.Stop()
		g.Expect(err).NotTo(HaveOccurred())
		t.Logf("live change to %s on 3 nodes, realised in %v; steady ping every 20ms: %v", e.name, realised.Round(time.Millisecond), stats)
		g.Expect(stats.LongestGap).To(BeNumerically("<", 5*time.Second), "the path is down at most 5 s")
	}
}

// TestAgentRestart stops node-a's agent with traffic running through node-a — gracefully (SIGTERM, as a service
// manager does) and by a crash (SIGKILL) — and starts it again: HNS keeps its state across an agent restart and
// the data plane does not depend on the agent process, so no packet may be lost over the whole window and the
// path is never down. A flow of the stopped agent's round that nothing wants, left on the switch while the agent
// is down, is gone once the new agent has installed the node network's, the routes' and the Pods' flows in its
// own round: no flow of the previous round is left.
func TestAgentRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(unix.SignalName(sig), func(t *testing.T) { agentRestart(t, sig) })
	}
}

func agentRestart(t *testing.T, sig syscall.Signal) {
	g := NewWithT(t)
	a := node("node-a")
	g.Expect(a.PersistsHNSState()).To(BeTrue(), "winnet-agent must keep the HNS simulator's state in %s, as HNS survives an agent restart", cluster.HNSStateFile)
	ping := startSteadyPing(t)
	ended, err := a.KillAgent(sig)
	g.Expect(err).NotTo(HaveOccurred())
	oldRound := flowRound(g, a)
	stray := fmt.Sprintf("cookie=%#x,table=%d,priority=5,ip,nw_dst=10.99.0.0/16,actions=drop",
		openflow.MakeCookie(oldRound, pipeline.CategoryRoute, 0x123), pipeline.L3ForwardingTable)
	out, err := a.OVS.Ofctl("add-flow", cluster.BridgeName, stray)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(a.StartAgent()).To(Succeed())
	time.Sleep(3 * time.Second) // the restarted agent resyncs the node network, routes and Pods meanwhile
	g.Expect(c.WaitReady(context.Background(), converge)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(flowsOfRound(g, a, oldRound)).To(BeEmpty())
	}).WithTimeout(converge).Should(Succeed(), "flows of the previous agent's round")
	flows, err := a.Flows()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(flows).NotTo(ContainSubstring("nw_dst=10.99.0.0/16"), "the stray flow of the previous round")
	g.Expect(flowsOfRound(g, a, flowRound(g, a))).To(HaveLen(len(strings.Split(flows, "\n"))), "every flow is in the new round")
	stats, err := ping.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("agent on node-a stopped with %v (%s) and started again; steady ping pod-a1 -> pod-b1 every 20ms: %v", sig, ended, stats)
	g.Expect(stats.Lost()).To(BeZero(), "packets lost while the agent restarted (every request of the window counts)")
	g.Expect(stats.LongestGap).To(BeNumerically("<", time.Second), "the longest time without a reply")
}

// flowRound is the round node n's bridge records for its flows' cookies.
func flowRound(g Gomega, n *cluster.Node) uint16 {
	out, err := n.OVS.Vsctl("get", "bridge", cluster.BridgeName, "external_ids:"+openflow.RoundExternalID)
	g.Expect(err).NotTo(HaveOccurred(), out)
	round, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(out), `"`), 10, 16)
	g.Expect(err).NotTo(HaveOccurred())
	return uint16(round)
}

// flowsOfRound returns the flows of node n's bridge whose cookies carry round.
func flowsOfRound(g Gomega, n *cluster.Node, round uint16) []string {
	lines, err := dumpRound(n, round)
	g.Expect(err).NotTo(HaveOccurred())
	return lines
}

// dumpRound dumps the flows of node n's bridge whose cookies carry round.
func dumpRound(n *cluster.Node, round uint16) ([]string, error) {
	return n.OVS.DumpFlows(cluster.BridgeName, fmt.Sprintf("cookie=%#x/%#x", openflow.MakeCookie(round, 0, 0), openflow.RoundMask))
}

// TestVswitchdKilled kills ovs-vswitchd on node-b with SIGKILL and starts it again with traffic running: the
// agent replays the flows and the path is back within 2 s of the restart.
func TestVswitchdKilled(t *testing.T) {
	g := NewWithT(t)
	ping := startSteadyPing(t)
	b := node("node-b")
	killed := b.OVS.VswitchdPid()
	g.Expect(b.OVS.KillVswitchd()).To(Succeed()) // fails unless ovs-vswitchd ran and died of SIGKILL
	g.Expect(b.OVS.StartVswitchd()).To(Succeed())
	g.Expect(b.OVS.VswitchdPid()).NotTo(BeElementOf(0, killed), "a new ovs-vswitchd runs")
	restarted := time.Now()
	from, to := steadyPath()
	g.Eventually(func() int {
		_, received, _ := cluster.Ping(from, to, 1)
		return received
	}).WithTimeout(converge).Should(Equal(1))
	time.Sleep(time.Second)
	stats, err := ping.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	back, ok := stats.FirstReplyAfter(restarted)
	g.Expect(ok).To(BeTrue())
	t.Logf("ovs-vswitchd killed and restarted on node-b: traffic back %v after the restart; %v", back.Round(time.Millisecond), stats)
	g.Expect(back).To(BeNumerically("<", 2*time.Second), "traffic back within 2 s of the restart")
	g.Expect(c.WaitReady(context.Background(), converge)).To(Succeed())
}

// TestAddAndDeleteNode adds a fourth node: every node gets a route to it and traffic passes; deleting it takes
// the route away everywhere.
func TestAddAndDeleteNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d, err := c.AddNode(ctx, cluster.NodeSpec{Name: "node-d", IP: netip.MustParseAddr("192.168.77.14"), PodCIDR: netip.MustParsePrefix("10.244.4.0/24")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.WaitReady(ctx, readyTimeout)).To(Succeed())
	for _, n := range c.Nodes() {
		if n.Name == "node-d" {
			continue
		}
		g.Expect(n.Exec("ip", "route", "show", d.PodCIDR.String())).To(ContainSubstring("via "+d.Gateway.String()), "route on %s", n.Name)
	}
	expectAllOK(t, "with node-d", []cluster.Check{
		{From: node("node-a").GatewayPlace(), To: d.GatewayPlace(), Path: "vxlan"},
		{From: d.GatewayPlace(), To: node("node-c").GatewayPlace(), Path: "vxlan"},
	}, 3)

	g.Expect(c.RemoveNode(ctx, "node-d")).To(Succeed())
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
	for _, n := range c.Nodes() {
		g.Expect(n.Exec("ip", "route", "show", d.PodCIDR.String())).To(BeEmpty(), "route on %s", n.Name)
		g.Expect(n.Flows()).NotTo(ContainSubstring(d.PodCIDR.String()), "flows on %s", n.Name)
	}
}

// TestRebootHeals reboots node-c (HNS state gone, host IP back on the uplink, stale bridge, agent starting at
// boot): the node rebuilds its network with no manual step and traffic passes again.
func TestRebootHeals(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc := node("node-c")
	before, err := c.Network(ctx, cc.Name)
	g.Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	g.Expect(cc.Reboot()).To(Succeed())
	g.Eventually(func(g Gomega) {
		w, err := c.Network(ctx, cc.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(w.Status.HNSNetworkID).NotTo(Equal(before.Status.HNSNetworkID), "the HNS network is rebuilt")
	}).WithTimeout(converge).Should(Succeed())
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
	g.Expect(cc.Exec("ip", "-4", "addr", "show", "dev", cluster.BridgeName)).To(ContainSubstring(cc.IP.String()+"/"), "the node IP is on the bridge again")
	checks := []cluster.Check{
		{From: node("node-a").GatewayPlace(), To: cc.GatewayPlace(), Path: "vxlan"},
		{From: cc.Host(), To: c.ExternalPlace(), Path: "underlay"},
	}
	p := recreatePod(t, "pod-c1", "node-c") // the reboot took the Pod's sandbox: kubelet makes a new one
	checks = append(checks, cluster.Check{From: p.Place(), To: pods["pod-a1"].Place(), Path: "vxlan"})
	expectAllOK(t, fmt.Sprintf("node-c rebooted; Ready again and its Pod recreated %v later", time.Since(start).Round(time.Millisecond)), checks, 3)
}

// TestDeleteNetworkRestoresUplink deletes node-c's WindowsNodeNetwork: the agent gives the uplink its address
// and default route back and removes the bridge; recreating the object builds the node network again.
func TestDeleteNetworkRestoresUplink(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc := node("node-c")
	g.Expect(c.DeletePod(ctx, pods["pod-c1"])).To(Succeed()) // drained first, as an operator would
	delete(pods, "pod-c1")
	g.Expect(c.DeleteNetwork(ctx, cc.Name, converge)).To(Succeed())
	g.Expect(cc.Exec("ip", "-4", "addr", "show", "dev", "uplink0")).To(ContainSubstring(cc.IP.String() + "/"))
	g.Expect(cc.Exec("ip", "route", "show", "default")).To(ContainSubstring("dev uplink0"))
	_, err := cc.Exec("ip", "link", "show", cluster.BridgeName)
	g.Expect(err).To(HaveOccurred(), "the bridge is gone")
	_, received, err := cluster.Ping(cc.Host(), c.ExternalIP, 2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(received).To(Equal(2), "the node reaches the underlay on its uplink")

	g.Expect(c.CreateNetwork(ctx, cc)).To(Succeed())
	g.Expect(c.WaitReady(ctx, readyTimeout)).To(Succeed())
	p := recreatePod(t, "pod-c1", "node-c")
	expectAllOK(t, "node-c's network recreated", []cluster.Check{
		{From: node("node-a").GatewayPlace(), To: cc.GatewayPlace(), Path: "vxlan"},
		{From: p.Place(), To: pods["pod-a1"].Place(), Path: "vxlan"},
	}, 3)
}

// recreatePod deletes the Pod (CNI DEL, object, namespace) if it exists and adds it again on the node.
func recreatePod(t *testing.T, name, nodeName string) *cluster.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	if p, ok := pods[name]; ok {
		g.Expect(c.DeletePod(ctx, p)).To(Succeed())
		delete(pods, name)
	}
	p, err := c.AddPod(ctx, node(nodeName), name, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	pods[name] = p
	return p
}
