//go:build upgrade

package cniskew

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet"
	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

var (
	server   *framework.APIServer
	previous framework.Release
)

func TestMain(m *testing.M) {
	r, err := framework.PreviousRelease()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the CNI skew tests: %v\n", err)
		os.Exit(1)
	}
	previous = r
	framework.Main(m, "CNI skew tests", &server, framework.MainOptions{})
}

const (
	// ready bounds the wait for the node network (the agent writes the conflist then).
	ready = 60 * time.Second
	// settle bounds the wait for what the agent writes to the API server after a CNI call.
	settle = 30 * time.Second
	bridge = "br-int"
)

// skew is one combination: the agent binary and the directory of the winnet-cni the runtime runs.
type skew struct {
	name            string
	agent, shimDir  string
	node            string
	nodeIP, podCIDR netip.Prefix
	underlay        netip.Prefix
}

// TestShimAndAgentOfDifferentReleases: during a rollout the shim and the agent of a node are of
// different releases, both ways. For each, a Pod is ADDed (its address in the node's Pod CIDR, its
// gateway answering), CHECKed, DELed twice (its address freed; no port, HNS endpoint, flow, attachment
// or PodEndpoint left), and a malformed call (CNI_ARGS that are not KEY=VALUE) gets a CNI error as the
// spec has it (exit status 1, the error object with code 4 and its msg on stdout) and changes nothing.
func TestShimAndAgentOfDifferentReleases(t *testing.T) {
	current := buildCurrent(t)
	t.Logf("this tree: winnet %s; previous release: winnet %s (%s) from %s", winnet.Version, previous.Version, previous.Commit[:12], previous.Dir)
	for _, c := range []skew{
		{
			name: fmt.Sprintf("agent %s, shim %s", winnet.Version, previous.Version), agent: filepath.Join(current, "winnet-agent"), shimDir: previous.BinDir,
			node: "skew-a", nodeIP: netip.MustParsePrefix("192.168.41.11/24"), podCIDR: netip.MustParsePrefix("10.244.41.0/24"),
			underlay: netip.MustParsePrefix("192.168.41.0/24"),
		},
		{
			name: fmt.Sprintf("agent %s, shim %s", previous.Version, winnet.Version), agent: filepath.Join(previous.BinDir, "winnet-agent"), shimDir: current,
			node: "skew-b", nodeIP: netip.MustParsePrefix("192.168.42.11/24"), podCIDR: netip.MustParsePrefix("10.244.42.0/24"),
			underlay: netip.MustParsePrefix("192.168.42.0/24"),
		},
	} {
		t.Run(c.name, func(t *testing.T) { run(t, c) })
	}
}

// buildCurrent builds this tree's winnet-agent and winnet-cni into a directory of the test.
func buildCurrent(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := hostcmd.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/winnet-agent", "./cmd/winnet-cni")
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building this tree's winnet-agent and winnet-cni: %v\n%s", err, out)
	}
	return dir
}

func run(t *testing.T, c skew) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, c.underlay)
	node := u.AddNode(t, c.node, c.nodeIP, simnode.NodeOptions{StartOVS: true})
	k := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.node}, Spec: corev1.NodeSpec{PodCIDR: c.podCIDR.String(), PodCIDRs: []string{c.podCIDR.String()}}}
	g.Expect(server.Client.Create(ctx, k)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), k) })
	a := startAgent(t, c.agent, node)

	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: c.node},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs:     []networkv1alpha1.CIDR{networkv1alpha1.CIDR(c.podCIDR.String())},
			NodeIP:       networkv1alpha1.IPv4Address(c.nodeIP.Addr().String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"},
		},
	}
	g.Expect(server.Client.Create(ctx, wnn)).To(Succeed())
	// Before the agent stops (cleanups run last first): the agent gives the node its network back.
	t.Cleanup(func() {
		_ = server.Client.Delete(context.Background(), wnn)
		for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if apierrors.IsNotFound(server.Client.Get(context.Background(), client.ObjectKeyFromObject(wnn), &networkv1alpha1.WindowsNodeNetwork{})) {
				return
			}
		}
		t.Errorf("the agent of %s did not remove its WindowsNodeNetwork's finalizer within %v", c.node, settle)
	})
	confFile := filepath.Join(a.confDir, cni.ConfListName)
	g.Eventually(func() error { _, err := os.Stat(confFile); return err }).WithTimeout(ready).WithPolling(100*time.Millisecond).
		Should(Succeed(), "the agent writes its conflist once the node network is Ready")
	list, err := libcni.ConfListFromFile(confFile)
	g.Expect(err).NotTo(HaveOccurred())
	containerd := libcni.NewCNIConfigWithCacheDir([]string{c.shimDir}, t.TempDir(), nil)
	before := a.snapshot(g, node)

	// The Pod, its network namespace and its runtime configuration, as containerd passes them.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + c.node, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: c.node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}
	g.Expect(server.Client.Create(ctx, pod)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	podNS := node.NS + "-pod"
	_, err = simnode.Exec("", "ip", "netns", "add", podNS)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", podNS) })
	sandbox := "sandbox" + c.node + strings.Repeat("0", 64-len("sandbox")-len(c.node))
	rt := &libcni.RuntimeConf{
		ContainerID: sandbox, NetNS: "/run/netns/" + podNS, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", string(pod.UID)}},
		CapabilityArgs: map[string]any{"dns": map[string]any{"servers": []string{"10.96.0.10"}}},
	}

	// A malformed call: CNI_ARGS with a pair that is not KEY=VALUE. The agent refuses it, the shim
	// prints the spec's error, and nothing is allocated.
	malformed := runShim(t, c.shimDir, list, map[string]string{
		"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "malformed" + strings.Repeat("0", 55), "CNI_NETNS": rt.NetNS, "CNI_IFNAME": "eth0",
		"CNI_PATH": c.shimDir, "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME",
	})
	g.Expect(malformed.exitCode).To(Equal(1), "a failed CNI command exits non-zero; stderr: %s", malformed.stderr)
	// The spec's error structure: code and msg, details optional; cniVersion, which the spec says a
	// plugin should add, is left out by the CNI library's skel (Error.Print) in both releases, as in
	// the reference plugins, and libcni does not need it.
	var cniErr struct {
		CNIVersion string `json:"cniVersion"`
		Code       *uint  `json:"code"`
		Msg        string `json:"msg"`
		Details    string `json:"details"`
	}
	dec := json.NewDecoder(bytes.NewReader(malformed.stdout))
	dec.DisallowUnknownFields()
	g.Expect(dec.Decode(&cniErr)).To(Succeed(), "stdout is the spec's error object alone: %q", malformed.stdout)
	g.Expect(dec.More()).To(BeFalse(), "nothing after the error object: %q", malformed.stdout)
	g.Expect(cniErr.CNIVersion).To(Or(BeEmpty(), Equal(list.CNIVersion)))
	g.Expect(cniErr.Code).To(HaveValue(BeEquivalentTo(cnitypes.ErrInvalidEnvironmentVariables)), "code 4: CNI_ARGS are invalid")
	g.Expect(cniErr.Msg).To(ContainSubstring("CNI_ARGS"))
	g.Expect(a.snapshot(g, node)).To(Equal(before), "the malformed call left nothing")

	// ADD: an address of the node's Pod CIDR, its gateway answering once the runtime started the
	// sandbox (the endpoint's vNIC appears only then, as with containerd on Windows).
	res, err := containerd.AddNetworkList(ctx, list, rt)
	g.Expect(err).NotTo(HaveOccurred(), "ADD")
	t.Cleanup(func() { _ = containerd.DelNetworkList(context.Background(), list, rt) })
	cur, err := types100.NewResultFromResult(res)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cur.IPs).To(HaveLen(1))
	ip, ok := netip.AddrFromSlice(cur.IPs[0].Address.IP.To4())
	g.Expect(ok).To(BeTrue())
	gateway := c.podCIDR.Addr().Next()
	g.Expect(c.podCIDR.Contains(ip)).To(BeTrue(), "the Pod's address %s is in the node's Pod CIDR %s", ip, c.podCIDR)
	g.Expect(cur.IPs[0].Gateway.String()).To(Equal(gateway.String()))
	sandboxes := filepath.Join(a.stateDir, agent.SimSandboxDir)
	g.Expect(hns.StartSandbox(sandboxes, rt.NetNS)).To(Succeed())
	t.Cleanup(func() { _ = hns.StopSandbox(sandboxes, rt.NetNS) })
	port := podendpoint.EndpointName(sandbox)
	g.Eventually(func() int {
		out, _ := node.OVS.Vsctl("get", "interface", port, "ofport")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}).WithTimeout(settle).WithPolling(20*time.Millisecond).Should(BeNumerically(">", 0), "the Pod's port %s forwards once its sandbox started", port)
	// (That the first ping is answered at once is integration/cni's to prove; here the Pod must work.)
	g.Eventually(func() (int, error) {
		_, received, err := simnode.Ping(podNS, gateway, 1)
		return received, err
	}).WithTimeout(10*time.Second).Should(Equal(1), "the Pod reaches its gateway")
	// What the leak check below looks at holds the Pod now: it would see a leak.
	added := a.snapshot(g, node)
	g.Expect(added.addresses).To(ConsistOf(append(slices.Clone(before.addresses), ip.String())))
	g.Expect(added.ports).To(ConsistOf(append(slices.Clone(before.ports), port)))
	g.Expect(added.endpoints).To(ConsistOf(append(slices.Clone(before.endpoints), port)), "the Pod's HNS endpoint, named as its port")
	g.Expect(added.attachments).To(HaveLen(len(before.attachments) + 1))
	g.Expect(len(added.podFlows)).To(BeNumerically(">", len(before.podFlows)))
	g.Eventually(func(g Gomega) {
		pep, err := framework.PodEndpointOf(ctx, server.Client, pod.Namespace, pod.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pep.Spec.IPs).To(ConsistOf(BeEquivalentTo(cur.IPs[0].Address.String())))
	}).WithTimeout(settle).Should(Succeed(), "the agent records the Pod's PodEndpoint")

	// CHECK passes.
	g.Expect(containerd.CheckNetworkList(ctx, list, rt)).To(Succeed(), "CHECK")
	t.Logf("ADD gave %s (port %s, %d Pod flows), CHECK passed", cur.IPs[0].Address.String(), port, len(added.podFlows)-len(before.podFlows))

	// DEL, twice: the address is free, nothing of the Pod is left on the node or in the API.
	g.Expect(containerd.DelNetworkList(ctx, list, rt)).To(Succeed(), "DEL")
	g.Expect(containerd.DelNetworkList(ctx, list, rt)).To(Succeed(), "a second DEL")
	after := a.snapshot(g, node)
	g.Expect(after.addresses).NotTo(ContainElement(ip.String()), "DEL frees the Pod's address")
	after.podEndpoints = before.podEndpoints // written asynchronously, checked below
	g.Expect(after).To(Equal(before), "DEL leaves no port, HNS endpoint, flow, attachment or address")
	g.Eventually(func(g Gomega) {
		g.Expect(a.snapshot(g, node).podEndpoints).To(Equal(before.podEndpoints))
	}).WithTimeout(settle).Should(Succeed(), "the PodEndpoint goes with the attachment")
}

// runningAgent is a winnet-agent process serving a simulated node.
type runningAgent struct {
	stateDir, confDir string
}

// startAgent runs the agent binary for node, its state, CNI socket and conflist in directories of the
// test; it is stopped (SIGTERM) at cleanup, and its log printed when the test failed.
func startAgent(t *testing.T, bin string, node *simnode.Node) *runningAgent {
	t.Helper()
	dir := t.TempDir()
	a := &runningAgent{stateDir: filepath.Join(dir, "state"), confDir: filepath.Join(dir, "net.d")}
	logFile := filepath.Join(dir, "agent.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := hostcmd.Command(bin, "--node-name", node.Name, "--kubeconfig", server.KubeconfigPath, "--ovsdb", node.OVS.DBSocket(),
		"--ovs-rundir", node.OVS.Dir, "--netns", node.NSPath, "--health-probe-bind-address", "0", "--metrics-bind-address", "0",
		"--state-dir", a.stateDir, "--cni-socket", filepath.Join(dir, "run", "cni.sock"), "--cni-conf-dir", a.confDir,
		"--audit-log-dir", filepath.Join(dir, "audit"))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = f.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("log of %s (last 60 lines):\n%s", bin, tail(string(b), 60))
			}
		}
	})
	return a
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// nodeState is what a node holds for Pods, read from outside the agent as any release keeps it:
// host-local's allocations, OVS ports, the HNS simulator's endpoints, Pod flows, the agent's Pod
// records and the node's PodEndpoints.
type nodeState struct {
	addresses, ports, endpoints, podFlows, attachments, podEndpoints []string
}

var cookieRE = regexp.MustCompile(`cookie=0x([0-9a-f]+)`)

func (a *runningAgent) snapshot(g Gomega, node *simnode.Node) nodeState {
	var s nodeState
	files, err := filepath.Glob(filepath.Join(a.stateDir, "ipam", "*", "*"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range files {
		if ip, err := netip.ParseAddr(filepath.Base(f)); err == nil {
			s.addresses = append(s.addresses, ip.String())
		}
	}
	out, err := node.OVS.Vsctl("list-ports", bridge)
	g.Expect(err).NotTo(HaveOccurred())
	s.ports = strings.Fields(out)
	var sim struct {
		Endpoints []struct {
			Name string `json:"name"`
		} `json:"endpoints"`
	}
	if b, err := os.ReadFile(filepath.Join(a.stateDir, "hns-sim.json")); err == nil {
		g.Expect(json.Unmarshal(b, &sim)).To(Succeed())
	} else {
		g.Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue(), "reading the HNS simulator's state: %v", err)
	}
	for _, ep := range sim.Endpoints {
		s.endpoints = append(s.endpoints, ep.Name)
	}
	flows, err := node.OVS.DumpFlows(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range flows {
		if m := cookieRE.FindStringSubmatch(f); m != nil {
			if cookie, err := strconv.ParseUint(m[1], 16, 64); err == nil && openflow.CookieCategory(cookie) == pipeline.CategoryPod {
				s.podFlows = append(s.podFlows, f)
			}
		}
	}
	records, err := filepath.Glob(filepath.Join(a.stateDir, "pods", "*.json"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range records {
		s.attachments = append(s.attachments, filepath.Base(r))
	}
	peps := &networkv1alpha1.PodEndpointList{}
	g.Expect(server.Client.List(context.Background(), peps)).To(Succeed())
	for _, p := range peps.Items {
		if p.Spec.NodeName == node.Name {
			s.podEndpoints = append(s.podEndpoints, p.Namespace+"/"+p.Name)
		}
	}
	for _, l := range [][]string{s.addresses, s.ports, s.endpoints, s.podFlows, s.attachments, s.podEndpoints} {
		slices.Sort(l)
	}
	return s
}

// shimRun is what one run of the shim printed and how it exited.
type shimRun struct {
	stdout, stderr []byte
	exitCode       int
}

// runShim runs the shim of shimDir as a runtime does for the conflist's plugin: the CNI_* variables
// in env, the plugin's configuration (with the list's name and cniVersion) on stdin, nothing else.
func runShim(t *testing.T, shimDir string, list *libcni.NetworkConfigList, env map[string]string) shimRun {
	t.Helper()
	var conf map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &conf); err != nil {
		t.Fatal(err)
	}
	conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := hostcmd.Command(filepath.Join(shimDir, cni.PluginType))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := shimRun{}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("running %s: %v", cmd.Path, err)
		}
		r.exitCode = exit.ExitCode()
	}
	r.stdout, r.stderr = stdout.Bytes(), stderr.Bytes()
	return r
}
