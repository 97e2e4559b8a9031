//go:build linux

package cni_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "CNI integration tests", &server, framework.MainOptions{})
}

const (
	converge = 30 * time.Second
	repair   = 10 * time.Second
)

// testNode is a simulated node whose agent serves CNI, with a CNI client set up like a runtime's
// (framework.PodNode); the tests here call CNI themselves.
type testNode struct {
	*framework.PodNode
	gateway netip.Addr
}

// startNode builds a simulated node, runs its agent, creates its WindowsNodeNetwork and waits for
// the conflist the agent writes once the node network is Ready.
func startNode(t *testing.T, name, nodeIP, podCIDR string) *testNode {
	t.Helper()
	n := newNode(t, name, nodeIP, podCIDR)
	n.CreateNetwork(t, converge, nil)
	return n
}

// newNode builds a simulated node with its Node object and runs its agent; the node network does
// not exist yet.
func newNode(t *testing.T, name, nodeIP, podCIDR string) *testNode {
	t.Helper()
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix(netip.MustParsePrefix(nodeIP).Masked().String()))
	pn := framework.StartPodNodeWith(t, server, underlay, name, nodeIP, podCIDR, converge, framework.PodNodeOptions{NoNetwork: true})
	return &testNode{PodNode: pn, gateway: pn.PodCIDR.Addr().Next()}
}

// testPod is a Pod on a test node: its network namespace, its object and its runtime config.
type testPod struct {
	name, ns, sandbox string
	uid               string
	rt                *libcni.RuntimeConf
}

var podSeq struct {
	sync.Mutex
	n int
}

// newPod creates a network namespace and, when withObject, the Pod object on the node.
func (n *testNode) newPod(t *testing.T, name string, withObject bool) *testPod {
	t.Helper()
	podSeq.Lock()
	podSeq.n++
	seq := podSeq.n
	podSeq.Unlock()
	p := &testPod{name: name, ns: fmt.Sprintf("%s-p%d", n.NS, seq), sandbox: fmt.Sprintf("sandbox%06d%s", seq, strings.Repeat("0", 50))}
	if _, err := simnode.Exec("", "ip", "netns", "add", p.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", p.ns) })
	if withObject {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}
		if err := server.Client.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		p.uid = string(pod.UID)
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	}
	p.rt = p.runtimeConf(p.sandbox)
	return p
}

// runtimeConf is the runtime configuration of a call for container id of the Pod, with CNI_ARGS as
// containerd passes them.
func (p *testPod) runtimeConf(containerID string) *libcni.RuntimeConf {
	args := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", p.name},
		{"K8S_POD_INFRA_CONTAINER_ID", p.sandbox}}
	if p.uid != "" {
		args = append(args, [2]string{"K8S_POD_UID", p.uid})
	}
	return &libcni.RuntimeConf{
		ContainerID: containerID, NetNS: "/run/netns/" + p.ns, IfName: "eth0", Args: args,
		CapabilityArgs: map[string]any{"dns": map[string]any{"servers": []string{"10.96.0.10"}, "searches": []string{"default.svc.cluster.local"}}},
	}
}

// add calls ADD for the Pod's sandbox, then starts the sandbox as containerd does once ADD returned
// (its endpoint's vNIC appears only then), waits for the Pod's port to forward, and returns the result.
func (n *testNode) add(t *testing.T, p *testPod) *types100.Result {
	t.Helper()
	res := n.addOnly(t, p)
	n.startSandbox(t, p)
	n.waitForwarding(t, p)
	return res
}

// addOnly calls ADD for the Pod's sandbox and returns the result, leaving the sandbox unstarted.
func (n *testNode) addOnly(t *testing.T, p *testPod) *types100.Result {
	t.Helper()
	res, err := n.CNI.AddNetworkList(context.Background(), n.ConfList, p.rt)
	if err != nil {
		t.Fatalf("ADD of %s: %v", p.name, err)
	}
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// startSandbox starts the Pod's sandbox, as the runtime does after ADD: its endpoint's vNIC appears.
func (n *testNode) startSandbox(t *testing.T, p *testPod) {
	t.Helper()
	if err := hns.StartSandbox(n.Agent.SandboxDir, p.rt.NetNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hns.StopSandbox(n.Agent.SandboxDir, p.rt.NetNS) })
}

// waitForwarding waits until the agent bound the Pod's OVS port to its vNIC (the attachment no
// longer waits for it) and OVS gave the port its ofport.
func (n *testNode) waitForwarding(t *testing.T, p *testPod) {
	t.Helper()
	port := podendpoint.EndpointName(p.sandbox)
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, ok := n.Agent.Pods.Pods.Store().Get(p.sandbox)
		out, err := n.OVS.Vsctl("get", "interface", port, "ofport")
		if ok && !a.WaitingForVNIC && err == nil {
			if ofport, err := strconv.Atoi(strings.TrimSpace(out)); err == nil && ofport > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the port %s of Pod %s did not forward within 10 s of its sandbox starting (ofport %q, %v)", port, p.name, strings.TrimSpace(out), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func podIP(g Gomega, res *types100.Result) netip.Addr {
	g.Expect(res.IPs).To(HaveLen(1))
	ip, ok := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	g.Expect(ok).To(BeTrue())
	return ip
}

// cniError returns the CNI error of err, failing when err is not one.
func cniError(g Gomega, err error) *cnitypes.Error {
	g.Expect(err).To(HaveOccurred())
	var e *cnitypes.Error
	g.Expect(errors.As(err, &e)).To(BeTrue(), "a CNI error, got %T: %v", err, err)
	return e
}

// podFlowCookie matches the cookie of a Pod flow: category pipeline.CategoryPod in bits 40..47.
var cookieRE = regexp.MustCompile(`cookie=0x([0-9a-f]+)`)

// podFlows returns the Pod flows installed in the node's switch.
func (n *testNode) podFlows(g Gomega) []string {
	lines, err := n.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, l := range lines {
		m := cookieRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		c, err := strconv.ParseUint(m[1], 16, 64)
		g.Expect(err).NotTo(HaveOccurred())
		if uint8(c>>40) == pipeline.CategoryPod {
			out = append(out, l)
		}
	}
	return out
}

// leftovers lists what Pod networking holds on the node: IPAM allocations, HNS endpoints and OVS
// ports of Pods, Pod flows and attachments.
func (n *testNode) leftovers(g Gomega) []string {
	ctx := context.Background()
	var out []string
	allocs, err := n.Agent.Pods.IPAM.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range allocs {
		out = append(out, "IPAM "+a.IP.String()+" for "+a.ContainerID)
	}
	w := &networkv1alpha1.WindowsNodeNetwork{}
	g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: n.Name}, w)).To(Succeed())
	eps, err := n.Agent.HNS.ListEndpoints(ctx, w.Status.HNSNetworkID)
	g.Expect(err).NotTo(HaveOccurred())
	for _, ep := range eps {
		out = append(out, "HNS endpoint "+ep.Name)
	}
	ports, err := n.Agent.OVSDB.OwnedPorts(ctx, "br-int")
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range ports {
		if strings.HasPrefix(p.Name, "winnet-") && p.Name != "winnet-gw0" && p.Name != "winnet-tun0" {
			out = append(out, "OVS port "+p.Name)
		}
	}
	for _, f := range n.podFlows(g) {
		out = append(out, "flow "+f)
	}
	for _, a := range n.Agent.Pods.Pods.Store().List() {
		out = append(out, "attachment "+a.SandboxID)
	}
	return out
}

// podEndpoint returns the Pod's PodEndpoint.
func podEndpoint(g Gomega, name string) *networkv1alpha1.PodEndpoint {
	pep, err := framework.PodEndpointOf(context.Background(), server.Client, "default", name)
	g.Expect(err).NotTo(HaveOccurred())
	return pep
}

// podEndpointErr returns the error of looking the Pod's PodEndpoint up (NotFound once it is gone).
func podEndpointErr(name string) error {
	_, err := framework.PodEndpointOf(context.Background(), server.Client, "default", name)
	return err
}

func readyStatus(pep *networkv1alpha1.PodEndpoint) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(pep.Status.Conditions, networkv1alpha1.ReadyCondition); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// stopAPIServer stops the kube-apiserver process (SIGSTOP: it neither answers nor refuses) and
// returns the function that resumes it; the test's cleanup resumes it too.
func stopAPIServer(t *testing.T) (resume func()) {
	t.Helper()
	u, err := url.Parse(server.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, "--secure-port="+u.Port()) {
			pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(f)))
		}
	}
	if pid == 0 {
		t.Fatalf("no kube-apiserver process serving port %s", u.Port())
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping kube-apiserver (pid %d): %v", pid, err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}
