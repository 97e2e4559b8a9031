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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// interopOn is winnet-controller's flannel interop, with the default VNI (4096) and annotation prefix.
var interopOn = []string{"--flannel-interop"}

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
	c, err = cluster.Start(ctx, cluster.Options{Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "flannel e2e: "+f+"\n", a...) },
		ControllerArgs: interopOn})
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
	results := c.Probe(context.Background(), []cluster.Check{
		{From: lxPods["lx-1"].Place(), To: lxPods["lx-2"].Place(), Path: "same flannel node"},
		{From: lxPods["lx-1"].Place(), To: linuxA.Host(), Path: "Pod to its node", WantSource: lxPods["lx-1"].IP},
	}, 5)
	t.Logf("\n%s", cluster.FormatTable(results))
	for _, r := range results {
		g.Expect(r.OK()).To(BeTrue(), "%s -> %s: %+v", r.From, r.To, r)
	}
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
	results := c.Probe(context.Background(), matrixChecks(), attempts)
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
// packets with DF fit both ways (Pod MTUs leave room for VXLAN on both sides), and each side routes once:
// flannel delivers to winnet's VTEP MAC on the fast path (a reply to pod-a1 crossed linux-a only: TTL 63),
// and winnet decrements the TTL of what it tunnels (a reply to lx-1 crossed node-a and linux-a: TTL 62).
func TestFlannelMatrix(t *testing.T) {
	g := NewWithT(t)
	expectMatrix(t, g, 10)
	a1, lx1 := pods["pod-a1"], lxPods["lx-1"]
	// 1450-byte packets: the MTU flannel gives its Pods (uplink - 50) and winnet's Pod MTU.
	g.Expect(pingTTL(g, a1.NS, lx1.IP, 1422)).To(Equal("63"))
	g.Expect(pingTTL(g, lx1.NS, a1.IP, 1422)).To(Equal("62"))
}
