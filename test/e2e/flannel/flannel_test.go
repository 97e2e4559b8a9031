//go:build linux

package flannel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/test/e2e/cluster"
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
	return nil
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
