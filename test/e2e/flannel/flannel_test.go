//go:build linux

package flannel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/simnode"
)

// One cluster for the package: two winnet nodes with a Pod each and the flannel node linux-a with two Pods.
var (
	c       *cluster.Cluster
	linuxA  *cluster.FlannelNode
	pods    = map[string]*cluster.Pod{}
	lxPods  = map[string]*cluster.FlannelPod{}
	prefix  = cluster.FlannelAnnotationPrefix + "/"
	timeout = 60 * time.Second
)

// interopOn turns winnet-controller's flannel interop on: the FlannelInterop named default, with the default
// VNI (4096) and annotation prefix.
func interopOn(ctx context.Context) error {
	fi := &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.FlannelInteropName}}
	if err := c.Client.Create(ctx, fi); err != nil {
		return fmt.Errorf("creating FlannelInterop %s: %w", fi.Name, err)
	}
	return nil
}

var nodeSpecs = []cluster.NodeSpec{
	{Name: "node-a", IP: netip.MustParseAddr("192.168.77.11"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24")},
	{Name: "node-b", IP: netip.MustParseAddr("192.168.77.12"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
}

var linuxSpec = cluster.FlannelNodeSpec{Name: "linux-a", IP: netip.MustParseAddr("192.168.77.21"), PodCIDR: netip.MustParsePrefix("10.244.9.0/24")}

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	var err error
	c, err = cluster.Start(ctx, cluster.Options{Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "flannel e2e: "+f+"\n", a...) }})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the flannel e2e tests need a cluster on this machine: %v\n", err)
		return 1
	}
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "tearing the flannel e2e cluster down: %v\n", err)
		}
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the flannel e2e cluster: %v\n%s%s", err, c.LogTails(40), flanneldTail())
		return 1
	}
	fmt.Fprintf(os.Stderr, "flannel e2e: cluster up in %v\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s%s", c.LogTails(60), flanneldTail())
	}
	return code
}

func flanneldTail() string {
	if linuxA == nil {
		return ""
	}
	return "--- flanneld of linux-a:\n" + linuxA.FlanneldLogTail(40) + "\n"
}

func setUp(ctx context.Context) error {
	if err := interopOn(ctx); err != nil {
		return err
	}
	for _, spec := range nodeSpecs {
		if _, err := c.AddNode(ctx, spec); err != nil {
			return err
		}
	}
	if err := c.WaitReady(ctx, timeout); err != nil {
		return err
	}
	for _, n := range c.Nodes() {
		p, err := c.AddPod(ctx, n, "pod-"+strings.TrimPrefix(n.Name, "node-")+"1", timeout)
		if err != nil {
			return err
		}
		pods[p.Name] = p
	}
	var err error
	if linuxA, err = c.AddFlannelNode(ctx, linuxSpec); err != nil {
		return err
	}
	for _, name := range []string{"lx-1", "lx-2"} {
		p, err := c.AddFlannelPod(ctx, linuxA, name)
		if err != nil {
			return err
		}
		lxPods[name] = p
	}
	c.SetRoutesToFlannelNodes(true)
	return c.WaitReady(ctx, timeout)
}

// backendData is flannel's backend-data annotation.
type backendData struct {
	VNI     int
	VtepMAC string
}

func annotations(g Gomega, name string) map[string]string {
	node := &corev1.Node{}
	g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Name: name}, node)).To(Succeed())
	return node.Annotations
}

// TestFlannelNodeRunsStockFlanneld checks the harness's flannel node: flanneld published its lease on its Node
// (VXLAN, VNI 4096, the MAC of flannel.4096, its public IP), created flannel.4096 on port 4789, and its Pods got
// addresses of its Pod CIDR on cni0 and reach each other and the node.
func TestFlannelNodeRunsStockFlanneld(t *testing.T) {
	g := NewWithT(t)
	mac, err := linuxA.VTEPMAC()
	g.Expect(err).NotTo(HaveOccurred())
	a := annotations(g, linuxA.Name)
	g.Expect(a).To(HaveKeyWithValue(prefix+"kube-subnet-manager", "true"))
	g.Expect(a).To(HaveKeyWithValue(prefix+"backend-type", "vxlan"))
	g.Expect(a).To(HaveKeyWithValue(prefix+"public-ip", linuxA.IP.String()))
	var bd backendData
	g.Expect(json.Unmarshal([]byte(a[prefix+"backend-data"]), &bd)).To(Succeed())
	g.Expect(bd).To(Equal(backendData{VNI: cluster.FlannelVNI, VtepMAC: mac}))

	out, err := linuxA.Exec("ip", "-d", "link", "show", cluster.FlannelDevice)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("vxlan id 4096"))
	g.Expect(out).To(ContainSubstring("dstport 4789"))

	for _, p := range lxPods {
		g.Expect(linuxA.PodCIDR.Contains(p.IP)).To(BeTrue(), "%s has %s", p.Name, p.IP)
	}
	expectAllOK(t, g, []cluster.Check{
		{From: lxPods["lx-1"].Place(), To: lxPods["lx-2"].Place(), Path: "same flannel node"},
		{From: lxPods["lx-1"].Place(), To: linuxA.Host(), Path: "Pod to its node", WantSource: lxPods["lx-1"].IP},
	}, 5)
}

// vtepMAC returns the VTEP MAC the winnet node reports in its status.
func vtepMAC(g Gomega, name string) string {
	w, err := c.Network(context.Background(), name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.Status.Tunnel).NotTo(BeNil())
	return w.Status.Tunnel.VTEPMAC
}

// expectRecord checks the flannel record winnet-controller published for a winnet node, and returns its MAC.
func expectRecord(g Gomega, n *cluster.Node) string {
	mac := vtepMAC(g, n.Name)
	a := annotations(g, n.Name)
	g.Expect(a).To(HaveKeyWithValue(prefix+"kube-subnet-manager", "true"))
	g.Expect(a).To(HaveKeyWithValue(prefix+"backend-type", "vxlan"))
	g.Expect(a).To(HaveKeyWithValue(prefix+"public-ip", n.IP.String()))
	g.Expect(a).To(HaveKeyWithValue(prefix+"backend-data", fmt.Sprintf(`{"VNI":4096,"VtepMAC":"%s"}`, mac)))
	return mac
}

// flannelFDB returns flannel.4096's forwarding entries on linux-a: MAC -> destination.
func flannelFDB(g Gomega) map[string]string {
	out, err := linuxA.Exec("bridge", "fdb", "show", "dev", cluster.FlannelDevice)
	g.Expect(err).NotTo(HaveOccurred())
	fdb := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "dst" {
			fdb[f[0]] = f[2]
		}
	}
	return fdb
}

// TestFlannelRecords checks what each side learned of the other: every winnet node has its own VTEP MAC in
// its flannel record, which flanneld programmed (one FDB entry per node); linux-a's RemoteSubnetRoute carries
// its public IP, its VTEP MAC and the flannel VNI. A removed record is restored.
func TestFlannelRecords(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	macs := map[string]string{}
	for _, n := range c.Nodes() {
		macs[n.Name] = expectRecord(g, n)
	}
	g.Expect(macs["node-a"]).NotTo(Equal(macs["node-b"]), "every winnet node has its own VTEP MAC")
	g.Eventually(func(g Gomega) {
		fdb := flannelFDB(g)
		for _, n := range c.Nodes() {
			g.Expect(fdb).To(HaveKeyWithValue(macs[n.Name], n.IP.String()))
		}
	}).WithTimeout(timeout).Should(Succeed(), "flanneld programs a forwarding entry per winnet node")

	lxMAC, err := linuxA.VTEPMAC()
	g.Expect(err).NotTo(HaveOccurred())
	rsr := &networkv1alpha1.RemoteSubnetRoute{}
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: linuxA.Name}, rsr)).To(Succeed())
	g.Expect(rsr.Spec.NodeIP).To(BeEquivalentTo(linuxA.IP.String()))
	g.Expect(rsr.Spec.Mode).To(Equal(networkv1alpha1.RouteModeTunnel))
	g.Expect(rsr.Spec.VNI).To(HaveValue(BeEquivalentTo(cluster.FlannelVNI)))
	g.Expect(rsr.Spec.VTEPMAC).To(BeEquivalentTo(lxMAC))
	g.Expect(rsr.Spec.PodCIDRs).To(ConsistOf(networkv1alpha1.CIDR(linuxA.PodCIDR.String())))

	// Someone removes a key of node-a's record: it comes back.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, prefix+"backend-data")
	g.Expect(c.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	g.Eventually(func(g Gomega) { expectRecord(g, c.Node("node-a")) }).WithTimeout(timeout).Should(Succeed())
}

// matrixChecks are the rows of the interop matrix: Pods on both winnet nodes and on linux-a, both ways, and
// the hosts, with the source each destination must see (no SNAT inside the cluster; linux-a's host traffic
// leaves from flannel.4096's address, a winnet node's from its gateway).
func matrixChecks() []cluster.Check {
	a1, b1, lx1, lx2 := pods["pod-a1"].Place(), pods["pod-b1"].Place(), lxPods["lx-1"].Place(), lxPods["lx-2"].Place()
	return []cluster.Check{
		{From: a1, To: lx1, Path: "winnet -> flannel vxlan"},
		{From: lx1, To: a1, Path: "flannel -> winnet vxlan"},
		{From: b1, To: lx2, Path: "winnet -> flannel vxlan"},
		{From: lx2, To: b1, Path: "flannel -> winnet vxlan"},
		{From: a1, To: b1, Path: "winnet vxlan"},
		{From: linuxA.Host(), To: a1, Path: "flannel host -> winnet Pod", WantSource: linuxA.TunnelSource()},
		{From: linuxA.Host(), To: b1, Path: "flannel host -> winnet Pod", WantSource: linuxA.TunnelSource()},
		{From: c.Node("node-a").Host(), To: lx1, Path: "winnet host -> flannel Pod", WantSource: c.Node("node-a").Gateway},
	}
}

func expectMatrix(t *testing.T, g Gomega, attempts int) {
	t.Helper()
	expectAllOK(t, g, matrixChecks(), attempts)
}

// expectAllOK waits until every check passed once (the first packets to a new tunnel peer are dropped while
// ovs-vswitchd resolves its MAC), then probes them attempts times, every attempt counting.
func expectAllOK(t *testing.T, g Gomega, checks []cluster.Check, attempts int) {
	t.Helper()
	took, failed, err := c.WaitReachable(context.Background(), checks, timeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("every row reachable after %v (%d tries failed meanwhile%s)", took.Round(time.Millisecond), len(failed), cluster.Lines(failed))
	results := c.Probe(context.Background(), checks, attempts)
	t.Logf("\n%s", cluster.FormatTable(results))
	for _, r := range results {
		g.Expect(r.OK()).To(BeTrue(), "%s -> %s: %+v", r.From, r.To, r)
	}
}

// pingTTL pings dst from a Pod with the don't-fragment bit and a payload of size bytes, and returns the TTL
// of the replies.
func pingTTL(g Gomega, ns string, dst netip.Addr, size int) string {
	out, err := simnode.Output(ns, "ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "-M", "do", "-s", fmt.Sprint(size), dst.String())
	g.Expect(err).NotTo(HaveOccurred(), out)
	m := ttlRE.FindStringSubmatch(out)
	g.Expect(m).NotTo(BeNil(), out)
	return m[1]
}

var ttlRE = regexp.MustCompile(`ttl=(\d+)`)

// TestFlannelMatrix runs the interop matrix with real packets, then checks the data path's details: full-size
// packets with DF fit both ways (Pod MTUs leave room for VXLAN on both sides), and each node routes what it
// sends into the tunnel and what it takes out of it, as the Linux kernel does on flannel's nodes: a reply
// crosses linux-a and node-a, TTL 62, either way.
func TestFlannelMatrix(t *testing.T) {
	g := NewWithT(t)
	expectMatrix(t, g, 5)
	a1, lx1 := pods["pod-a1"], lxPods["lx-1"]
	// 1450-byte packets: the MTU flannel gives its Pods (uplink - 50) and winnet's Pod MTU.
	g.Expect(pingTTL(g, a1.NS, lx1.IP, 1422)).To(Equal("62"))
	g.Expect(pingTTL(g, lx1.NS, a1.IP, 1422)).To(Equal("62"))
}

// TestDuplicateRouteDoesNotFlap adds a second route for linux-a's Pod CIDR with the wrong VNI, as a person
// wiring flannel by hand did: the older route (winnet-controller's) keeps its flows, the newer one reports
// Conflict (Duplicate) and is never installed, and traffic does not lose a packet.
func TestDuplicateRouteDoesNotFlap(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	manual := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "linux-a-manual"},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{NodeName: linuxA.Name, NodeIP: networkv1alpha1.IPAddress(linuxA.IP.String()),
			PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(linuxA.PodCIDR.String())}, Mode: networkv1alpha1.RouteModeTunnel,
			VNI: ptr.To(networkv1alpha1.VNI(1))},
	}
	g.Expect(c.Client.Create(ctx, manual)).To(Succeed())
	defer func() { g.Expect(c.Client.Delete(ctx, manual)).To(Succeed()) }()
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(manual), manual)).To(Succeed())
		cond := meta.FindStatusCondition(manual.Status.Conditions, networkv1alpha1.ConflictCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(networkv1alpha1.DuplicateReason))
		g.Expect(cond.Message).To(ContainSubstring("RemoteSubnetRoute linux-a"))
	}).WithTimeout(timeout).Should(Succeed())
	own := &networkv1alpha1.RemoteSubnetRoute{}
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: linuxA.Name}, own)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(own.Status.Conditions, networkv1alpha1.AcceptedCondition)).To(BeTrue(), "the older route stays accepted")

	// 60 pings over 12 s, across the agents' full passes (every 10 s) that made the flows flap before.
	b1, lx2 := pods["pod-b1"], lxPods["lx-2"]
	out, err := simnode.Output(b1.NS, "ping", "-n", "-q", "-c", "60", "-i", "0.2", "-W", "1", lx2.IP.String())
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring(" 0% packet loss"))
	flows, err := c.Node("node-b").Flows()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range strings.Split(flows, "\n") {
		if strings.Contains(f, "nw_dst="+linuxA.PodCIDR.String()+" ") {
			g.Expect(f).To(ContainSubstring("set_field:0x1000->tun_id"), "node-b tunnels to linux-a with flannel's VNI only")
		}
	}
}

// TestWinnetNodeJoinsAndLeaves adds a winnet node while flanneld runs: flanneld learns it from the record
// winnet-controller publishes and Pods reach each other both ways; the node leaves and flanneld's route to it
// goes.
func TestWinnetNodeJoinsAndLeaves(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	spec := cluster.NodeSpec{Name: "node-c", IP: netip.MustParseAddr("192.168.77.13"), PodCIDR: netip.MustParsePrefix("10.244.3.0/24")}
	n, err := c.AddNode(ctx, spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.WaitReady(ctx, timeout)).To(Succeed())
	pc1, err := c.AddPod(ctx, n, "pod-c1", timeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) { expectRecord(g, n) }).WithTimeout(timeout).Should(Succeed())
	g.Eventually(func(g Gomega) {
		out, err := linuxA.Exec("ip", "route", "show", spec.PodCIDR.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("dev " + cluster.FlannelDevice))
	}).WithTimeout(timeout).Should(Succeed(), "flanneld routes to the new node")
	expectAllOK(t, g, []cluster.Check{
		{From: pc1.Place(), To: lxPods["lx-1"].Place(), Path: "new winnet node -> flannel"},
		{From: lxPods["lx-1"].Place(), To: pc1.Place(), Path: "flannel -> new winnet node"},
	}, 5)

	g.Expect(c.RemoveNode(ctx, n.Name)).To(Succeed())
	g.Eventually(func(g Gomega) {
		out, err := linuxA.Exec("ip", "route", "show", spec.PodCIDR.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(out)).To(BeEmpty())
	}).WithTimeout(timeout).Should(Succeed(), "flanneld removes its route to the node that left")
	g.Expect(c.WaitReady(ctx, timeout)).To(Succeed())
}

// TestFlanneldRestart restarts flanneld: it keeps its VTEP MAC (so winnet's route stays right) and the matrix
// passes again.
func TestFlanneldRestart(t *testing.T) {
	g := NewWithT(t)
	before, err := linuxA.VTEPMAC()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(linuxA.RestartFlanneld(context.Background(), timeout)).To(Succeed())
	after, err := linuxA.VTEPMAC()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(before))
	expectMatrix(t, g, 5)
}

// TestFlannelPublicIPChange re-addresses linux-a: flanneld publishes the new public-ip, winnet-controller
// updates linux-a's route and the winnet nodes tunnel to the new address; then it moves back.
func TestFlannelPublicIPChange(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	for _, ip := range []netip.Addr{netip.MustParseAddr("192.168.77.22"), linuxSpec.IP} {
		g.Expect(c.SetFlannelNodeIP(ctx, linuxA, ip, timeout)).To(Succeed())
		g.Eventually(func(g Gomega) {
			rsr := &networkv1alpha1.RemoteSubnetRoute{}
			g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: linuxA.Name}, rsr)).To(Succeed())
			g.Expect(rsr.Spec.NodeIP).To(BeEquivalentTo(ip.String()))
		}).WithTimeout(timeout).Should(Succeed())
		g.Expect(c.WaitReady(ctx, timeout)).To(Succeed())
		g.Eventually(func(g Gomega) {
			flows, err := c.Node("node-a").Flows()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(flows).To(ContainSubstring("set_field:" + ip.String() + "->tun_dst"))
		}).WithTimeout(timeout).Should(Succeed())
		expectMatrix(t, g, 5)
	}
}

// TestInteropOff turns winnet-controller's flannel interop off (deletes the FlannelInterop): the winnet nodes'
// flannel records and the route to linux-a go; turned on again, both come back and the matrix passes.
func TestInteropOff(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(c.Client.Delete(ctx, &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.FlannelInteropName}})).To(Succeed())
	c.SetRoutesToFlannelNodes(false)
	g.Eventually(func(g Gomega) {
		for _, n := range c.Nodes() {
			for k := range annotations(g, n.Name) {
				g.Expect(k).NotTo(HavePrefix(prefix), "%s keeps flannel annotation %s", n.Name, k)
				g.Expect(k).NotTo(Equal("network.winnet.io/flannel-record"))
			}
		}
		err := c.Client.Get(ctx, client.ObjectKey{Name: linuxA.Name}, &networkv1alpha1.RemoteSubnetRoute{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the route to linux-a is gone: %v", err)
	}).WithTimeout(timeout).Should(Succeed())
	g.Expect(c.WaitReady(ctx, timeout)).To(Succeed())
	g.Expect(annotations(g, linuxA.Name)).To(HaveKeyWithValue(prefix+"kube-subnet-manager", "true"), "flanneld's own record stays")

	g.Expect(interopOn(ctx)).To(Succeed())
	c.SetRoutesToFlannelNodes(true)
	g.Expect(c.WaitReady(ctx, timeout)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, n := range c.Nodes() {
			expectRecord(g, n)
		}
	}).WithTimeout(timeout).Should(Succeed())
	expectMatrix(t, g, 5)
}
