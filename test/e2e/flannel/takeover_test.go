//go:build linux

package flannel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// The node the takeover test moves from flannel and kube-proxy to winnet.
var movedSpec = cluster.NodeSpec{Name: "win-m", IP: netip.MustParseAddr("192.168.77.15"), PodCIDR: netip.MustParsePrefix("10.244.5.0/24")}

const takeoverEchoPort = 8080

// probeInterval is how often each ping probe sends.
const probeInterval = 50 * time.Millisecond

// TestTakeoverFromFlannelAndKubeProxy moves one node of the running cluster from flannel (win-overlay) and
// kube-proxy (winkernel) to winnet, following docs/getting-started.md "Coming from flannel and kube-proxy",
// while probes between the other nodes run: Pods of node-a, node-b and linux-a to each other, a Service with an
// endpoint on each kind of node (pod-b1 and lx-2) through its ClusterIP from node-a's Pod and through node-b's
// NodePort from linux-a. The node starts seeded as flannel and kube-proxy leave a Windows node (its HNS, conflist,
// subnet file, flanneld's record on its Node); the test cordons it, drains it (one Pod's sandbox goes without a
// CNI DEL), checks that `takeover --dry-run` lists exactly the seeded leftovers, takes over, lets winnet's agent
// build its network, and uncordons it once flanneld on linux-a sends to winnet's VTEP; a new Pod there is then
// reached from linux-a and node-a. Then it goes back as the same page says (drain, stop the agent, `winnet-agent
// reset`, forget the node's network, drop the mark of winnet's record, start the old stack) until linux-a and
// winnet's nodes use flanneld's lease again. The other nodes' probes must lose nothing either way: they do not
// depend on the moved node. It prints one line with the numbers of each way.
func TestTakeoverFromFlannelAndKubeProxy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a1, b1, lx1, lx2 := pods["pod-a1"], pods["pod-b1"], lxPods["lx-1"], lxPods["lx-2"]

	svc := takeoverService(t, g, b1.Place(), lx2.Place())
	clusterIP := netip.MustParseAddr(svc.Spec.ClusterIP)
	nodePort := netip.AddrPortFrom(c.Node("node-b").IP, uint16(svc.Spec.Ports[0].NodePort))
	svcDst := netip.AddrPortFrom(clusterIP, 80)

	// The node as flannel and kube-proxy left it, with two Pods.
	fw, err := c.AddFlannelWindowsNode(ctx, cluster.FlannelWindowsSpec{NodeSpec: movedSpec, Pods: []string{"old-m1", "old-m2"},
		Services: []cluster.KubeProxyService{{ClusterIP: clusterIP, Backends: []netip.Addr{b1.IP, lx2.IP}}}})
	t.Cleanup(func() {
		if err := c.RemoveNode(context.Background(), movedSpec.Name); err != nil {
			t.Errorf("removing %s: %v", movedSpec.Name, err)
		}
	})
	g.Expect(err).NotTo(HaveOccurred())
	subnetIP := fw.PodCIDR.Addr() // flanneld's neighbour entry for a lease is its subnet's network address
	g.Eventually(func(g Gomega) {
		fdb, err := linuxA.FDB()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fdb).To(HaveKeyWithValue(fw.VtepMAC, fw.IP.String()))
		g.Expect(linuxA.Neighbour(subnetIP)).To(Equal(fw.VtepMAC))
		rsr := &networkv1alpha1.RemoteSubnetRoute{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: fw.Name}, rsr)).To(Succeed())
		g.Expect(rsr.Spec.VTEPMAC).To(BeEquivalentTo(fw.VtepMAC))
	}).WithTimeout(timeout).Should(Succeed(), "flanneld on linux-a and winnet-controller use flanneld's lease of %s", fw.Name)

	// Probes between the other nodes, for the whole move.
	others := startOtherProbes(t, g, svcDst, nodePort)
	// 1. Cordon and drain. The takeover refuses while Pods are attached.
	moveStart := time.Now()
	g.Expect(c.Cordon(ctx, fw.Name, true)).To(Succeed())
	out, code, err := fw.Takeover("--from", "flannel,kube-proxy", "--dry-run")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(1), out)
	g.Expect(out).To(ContainSubstring("a Pod still uses it"))
	g.Expect(c.Drain(ctx, fw, "old-m2")).To(Succeed())
	// 2. Stopping flanneld and kube-proxy: nothing of theirs runs on the simulated node.

	// 3. Look first: exactly the seeded leftovers.
	out, code, err = fw.Takeover("--from", "flannel,kube-proxy", "--dry-run")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(0), out)
	t.Logf("takeover --dry-run:\n%s", out)
	expectLeftoverLines(g, out, "would remove: ", fw.Leftovers)

	// 4. Take over.
	out, code, err = fw.Takeover("--from", "flannel,kube-proxy")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(0), out)
	expectLeftoverLines(g, out, "removed: ", fw.Leftovers)
	inv, err := fw.HNSInventory()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inv.Foreign()).To(BeEmpty(), "flannel's and kube-proxy's HNS state is gone")
	g.Expect(fw.ConfFile).NotTo(BeAnExistingFile())
	g.Expect(fw.SubnetFile).NotTo(BeAnExistingFile())

	// 5. winnet builds its network; flannel's record on the Node passes to winnet's VTEP MAC, and flanneld on
	// linux-a follows it.
	agentStart := time.Now()
	g.Expect(c.StartWinnet(ctx, fw.Node)).To(Succeed())
	var fdbHandover time.Duration
	g.Eventually(func(g Gomega) {
		mac := recordMAC(g, fw.Name)
		g.Expect(mac).NotTo(Equal(fw.VtepMAC), "the Node still carries flanneld's record")
		fdb, err := linuxA.FDB()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fdb).To(HaveKeyWithValue(mac, fw.IP.String()))
		g.Expect(linuxA.Neighbour(subnetIP)).To(Equal(mac))
		fdbHandover = time.Since(agentStart)
	}).WithTimeout(timeout).WithPolling(20*time.Millisecond).Should(Succeed(), "linux-a sends to winnet's VTEP on %s", fw.Name)
	// Until then nothing on the node needed reaching: it is cordoned and holds no Pod.
	onNode := &corev1.PodList{}
	g.Expect(c.Client.List(ctx, onNode, client.MatchingFields{"spec.nodeName": fw.Name})).To(Succeed())
	g.Expect(onNode.Items).To(BeEmpty(), "Pods on %s before linux-a sends to winnet's VTEP", fw.Name)
	node := &corev1.Node{}
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: fw.Name}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeTrue())
	g.Expect(c.WaitReady(ctx, timeout)).To(Succeed())
	readyAfter := time.Since(agentStart)
	winnetMAC := expectRecord(g, fw.Node)
	g.Expect(linuxA.Neighbour(subnetIP)).To(Equal(winnetMAC), "linux-a's neighbour entry for %s is winnet's VTEP", subnetIP)
	rsr := &networkv1alpha1.RemoteSubnetRoute{}
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: fw.Name}, rsr)).To(Succeed())
	g.Expect(rsr.Spec.VTEPMAC).NotTo(BeEquivalentTo(fw.VtepMAC), "winnet's nodes no longer use flanneld's lease of %s", fw.Name)
	fdb, _ := linuxA.FDB()
	t.Logf("linux-a's FDB after the handover: %v (flanneld adds the new MAC's entry and leaves the old one)", fdb)

	// 6. Uncordon: only now may Pods come, and linux-a already sends to winnet's VTEP.
	g.Expect(c.Cordon(ctx, fw.Name, false)).To(Succeed())
	m1, err := c.AddPod(ctx, fw.Node, "pod-m1", timeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), m1) })
	g.Expect(fw.PodCIDR.Contains(m1.IP)).To(BeTrue())
	var movedPings []*cluster.SteadyPing
	for _, from := range []cluster.Place{lx1.Place(), a1.Place()} {
		p, err := cluster.StartSteadyPing(from, m1.IP, probeInterval)
		g.Expect(err).NotTo(HaveOccurred())
		movedPings = append(movedPings, p)
	}
	movedRows := []cluster.Check{
		{From: lx1.Place(), To: m1.Place(), Path: "flannel -> moved node"},
		{From: m1.Place(), To: lx1.Place(), Path: "moved node -> flannel"},
		{From: a1.Place(), To: m1.Place(), Path: "winnet -> moved node"},
		{From: m1.Place(), To: b1.Place(), Path: "moved node -> winnet"},
		{From: linuxA.Host(), To: m1.Place(), Path: "flannel host -> moved node", WantSource: linuxA.TunnelSource()},
	}
	expectAllOK(t, g, movedRows, 3)
	g.Eventually(func() error { return askEcho(m1.Place(), svcDst) }).WithTimeout(timeout).Should(Succeed(), "the Service from the moved node")

	// The numbers.
	lost, gap, lines := others.stop(g)
	var movedReady time.Duration
	for _, p := range movedPings {
		st, err := p.Stop()
		g.Expect(err).NotTo(HaveOccurred())
		d, ok := st.FirstReplyAfter(moveStart)
		g.Expect(ok).To(BeTrue())
		if movedReady == 0 || d < movedReady {
			movedReady = d
		}
		lines = append(lines, fmt.Sprintf("to the moved node's pod-m1: %v", st))
	}
	t.Logf("probes during the move:\n\t%s", strings.Join(lines, "\n\t"))
	t.Logf("the agent's network was Ready %.2f s after it started", readyAfter.Seconds())
	summary := fmt.Sprintf("takeover lost=%d gap_ms=%d moved_node_ready_s=%.2f fdb_handover_s=%.2f",
		lost, gap.Milliseconds(), movedReady.Seconds(), fdbHandover.Seconds())
	fmt.Println(summary)
	t.Log(summary)
	if lost > 0 {
		t.Logf("switch events on the nodes during the move:%s", cluster.Lines(c.SwitchEvents(moveStart)))
		t.Logf("the agents' and winnet-controller's log around the losses:%s", cluster.Lines(logsAround(others.lostAt)))
	}
	g.Expect(lost).To(BeZero(), "the other nodes do not depend on the moved node")

	inv, err = fw.HNSInventory()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inv.Foreign()).To(BeEmpty(), "nothing of flannel's or kube-proxy's after the move")

	// And back, as docs/getting-started.md says: drain, stop winnet's agent (the label), reset, forget the
	// node's network, drop the mark of winnet's record, start the old stack.
	others = startOtherProbes(t, g, svcDst, nodePort)
	g.Expect(c.Cordon(ctx, fw.Name, true)).To(Succeed())
	g.Expect(c.DeletePod(ctx, m1)).To(Succeed())
	g.Expect(fw.StopAgent(syscall.SIGTERM)).To(Succeed())
	out, code, err = fw.Reset()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(0), out)
	t.Logf("winnet-agent reset:\n%s", out)
	g.Expect(out).To(MatchRegexp(`removed: HNS network winnet .* on adapter uplink0`))
	inv, err = fw.HNSInventory()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inv.Networks).To(BeEmpty(), "reset leaves no HNS network")
	g.Expect(filepath.Join(fw.CNIConfDir, cluster.ConflistName)).NotTo(BeAnExistingFile())
	g.Expect(fw.UplinkHolds(fw.IP)).To(BeTrue(), "the adapter has its address back")
	g.Expect(c.ForgetNetwork(ctx, fw.Name)).To(Succeed())
	// While the mark stays, winnet-controller takes any record on the Node for winnet's own.
	g.Expect(annotations(g, fw.Name)).To(HaveKeyWithValue("network.winnet.io/flannel-record", cluster.FlannelAnnotationPrefix))
	unmark := []byte(`{"metadata":{"annotations":{"network.winnet.io/flannel-record":null}}}`)
	g.Expect(c.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fw.Name}}, client.RawPatch(types.MergePatchType, unmark))).To(Succeed())
	g.Expect(c.RestartOldStack(ctx, fw)).To(Succeed())
	backStart := time.Now()
	g.Eventually(func(g Gomega) {
		g.Expect(linuxA.Neighbour(subnetIP)).To(Equal(fw.VtepMAC))
		fdb, err := linuxA.FDB()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fdb).To(HaveKeyWithValue(fw.VtepMAC, fw.IP.String()))
		rsr := &networkv1alpha1.RemoteSubnetRoute{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: fw.Name}, rsr)).To(Succeed())
		g.Expect(rsr.Spec.VTEPMAC).To(BeEquivalentTo(fw.VtepMAC))
		g.Expect(rsr.Spec.VNI).To(HaveValue(BeEquivalentTo(cluster.FlannelVNI)))
	}).WithTimeout(timeout).Should(Succeed(), "linux-a and winnet's nodes use flanneld's lease of %s again", fw.Name)
	t.Logf("flanneld's lease of %s in use %.2f s after it was published again", fw.Name, time.Since(backStart).Seconds())
	g.Consistently(func(g Gomega) {
		a := annotations(g, fw.Name)
		g.Expect(a).NotTo(HaveKey("network.winnet.io/flannel-record"))
		g.Expect(recordMAC(g, fw.Name)).To(Equal(fw.VtepMAC))
	}).WithTimeout(2*time.Second).Should(Succeed(), "winnet-controller leaves flanneld's record alone")
	g.Expect(c.Cordon(ctx, fw.Name, false)).To(Succeed())
	lost, gap, lines = others.stop(g)
	t.Logf("probes during the way back:\n\t%s", strings.Join(lines, "\n\t"))
	if lost > 0 {
		t.Logf("the agents' and winnet-controller's log around the losses:%s", cluster.Lines(logsAround(others.lostAt)))
	}
	back := fmt.Sprintf("takeover reverse lost=%d gap_ms=%d", lost, gap.Milliseconds())
	fmt.Println(back)
	t.Log(back)
	g.Expect(lost).To(BeZero(), "the other nodes do not depend on the node going back")
}

// logsAround returns the lines of the agents' and winnet-controller's logs stamped within a second of the times.
func logsAround(times []time.Time) []string {
	files := map[string]string{"winnet-controller": filepath.Join(c.RunDir, "winnet-controller.log")}
	for _, n := range c.Nodes() {
		files[n.Name] = n.AgentLog()
	}
	var out []string
	for who, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", who, err))
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			var entry struct{ TS string }
			if json.Unmarshal([]byte(line), &entry) != nil {
				continue
			}
			ts, err := time.Parse(time.RFC3339, entry.TS)
			if err != nil {
				continue
			}
			for _, at := range times {
				if d := ts.Sub(at.Truncate(time.Second)); d >= -time.Second && d <= time.Second {
					out = append(out, who+": "+line)
					break
				}
			}
		}
	}
	return out
}

// otherProbes are the probes between the nodes that do not move: Pods of node-a, node-b and linux-a to each
// other, the Service's ClusterIP from node-a's Pod and its NodePort on node-b from linux-a.
type otherProbes struct {
	rows  []cluster.Check
	pings []*cluster.SteadyPing
	ticks []*cluster.TickProbe
	// lostAt holds when each lost request or failed try started, once stopped.
	lostAt []time.Time
}

func startOtherProbes(t *testing.T, g Gomega, svcDst, nodePort netip.AddrPort) *otherProbes {
	a1, b1, lx1, lx2 := pods["pod-a1"], pods["pod-b1"], lxPods["lx-1"], lxPods["lx-2"]
	p := &otherProbes{rows: []cluster.Check{
		{From: a1.Place(), To: lx1.Place(), Path: "winnet -> flannel"},
		{From: lx1.Place(), To: a1.Place(), Path: "flannel -> winnet"},
		{From: a1.Place(), To: b1.Place(), Path: "winnet -> winnet"},
		{From: lx2.Place(), To: b1.Place(), Path: "flannel -> winnet"},
	}}
	_, failed, err := c.WaitReachable(context.Background(), p.rows, timeout)
	g.Expect(err).NotTo(HaveOccurred(), "%s", cluster.Lines(failed))
	for _, r := range p.rows {
		ping, err := cluster.StartSteadyPing(r.From, r.To.IP, probeInterval)
		g.Expect(err).NotTo(HaveOccurred())
		p.pings = append(p.pings, ping)
	}
	p.ticks = []*cluster.TickProbe{
		cluster.StartTicks("pod-a1 -> Service ClusterIP", 100*time.Millisecond, func() error { return askEcho(a1.Place(), svcDst) }),
		cluster.StartTicks("linux-a -> Service NodePort on node-b", 100*time.Millisecond, func() error { return askEcho(linuxA.Host(), nodePort) }),
	}
	return p
}

// stop stops the probes and returns the packets and tries lost, the longest gap, and a line per probe.
func (p *otherProbes) stop(g Gomega) (lost int, gap time.Duration, lines []string) {
	for i, ping := range p.pings {
		st, err := ping.Stop()
		g.Expect(err).NotTo(HaveOccurred())
		lost += st.Lost()
		gap = max(gap, st.LongestGap)
		p.lostAt = append(p.lostAt, st.LostAt...)
		lines = append(lines, fmt.Sprintf("%s -> %s (%s): %v", p.rows[i].From.Label, p.rows[i].To.Label, p.rows[i].Path, st))
		for _, at := range st.LostAt {
			lines = append(lines, fmt.Sprintf("  lost the request sent at %s", at.UTC().Format("15:04:05.000")))
		}
	}
	for _, tp := range p.ticks {
		rs := tp.Finish()
		failed, firstErr := rs.Failures()
		lost += failed
		gap = max(gap, rs.LongestGap())
		lines = append(lines, fmt.Sprintf("%s: %d tries, %d failed (first: %v), longest gap %v", tp.Name, len(rs), failed, firstErr, rs.LongestGap()))
		p.lostAt = append(p.lostAt, rs.FailedAt()...)
	}
	return lost, gap, lines
}

// takeoverService creates the NodePort Service "takeover-echo" whose endpoints are echo servers in the two places
// (one on a winnet node, one on the flannel node; the latter is no Kubernetes Pod here, hence the
// EndpointSlice written by hand), and waits until node-a and node-b balance it.
func takeoverService(t *testing.T, g Gomega, endpoints ...cluster.Place) *corev1.Service {
	ctx := context.Background()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "takeover-echo", Labels: map[string]string{discoveryv1.LabelServiceName: "takeover-echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(takeoverEchoPort))}},
	}
	for _, p := range endpoints {
		e, err := cluster.ServeNamedEcho("/run/netns/"+p.NS, p.Label, []int{takeoverEchoPort}, nil)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(e.Close)
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "takeover-echo"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(takeoverEchoPort)}}},
	}
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	g.Expect(c.Client.Create(ctx, slice)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), slice) })
	for _, n := range []string{"node-a", "node-b"} {
		g.Eventually(c.Node(n).Flows).WithTimeout(timeout).Should(ContainSubstring("nw_dst="+svc.Spec.ClusterIP+",tp_dst=80"), "%s balances the Service", n)
	}
	nodePort := netip.AddrPortFrom(c.Node("node-b").IP, uint16(svc.Spec.Ports[0].NodePort))
	g.Eventually(func() error {
		return askEcho(pods["pod-a1"].Place(), netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80))
	}).
		WithTimeout(timeout).Should(Succeed())
	g.Eventually(func() error { return askEcho(linuxA.Host(), nodePort) }).WithTimeout(timeout).Should(Succeed())
	return svc
}

// askEcho opens a TCP connection from a place and reads the echo server's answer.
func askEcho(from cluster.Place, dst netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := cluster.AskEcho(ctx, from, "tcp4", dst, time.Second)
	return err
}

// recordMAC returns the VtepMAC of the flannel record on the Node.
func recordMAC(g Gomega, name string) string {
	var bd backendData
	g.Expect(json.Unmarshal([]byte(annotations(g, name)[prefix+"backend-data"]), &bd)).To(Succeed())
	return bd.VtepMAC
}

// expectLeftoverLines checks that the lines of out starting with verb name the leftovers one each: as many lines
// as leftovers, every leftover in exactly one line.
func expectLeftoverLines(g Gomega, out, verb string, leftovers []string) {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, verb) {
			lines = append(lines, l)
		}
	}
	g.Expect(lines).To(HaveLen(len(leftovers)), out)
	for _, want := range leftovers {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, want) {
				n++
			}
		}
		g.Expect(n).To(Equal(1), "%q in the lines %q:\n%s", want, verb, out)
	}
}
