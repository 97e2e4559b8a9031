//go:build linux

package uninstall_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/cluster"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/internal/hns"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "uninstall integration tests", &server, framework.MainOptions{})
}

const (
	ns       = "winnet-system"
	converge = 30 * time.Second
)

// node is a simulated Windows node with its agent and a CNI client set up as containerd's.
type node struct {
	*simnode.Node
	agent  *framework.Agent
	before simnode.Snapshot
	cni    *framework.Runtime
	pods   []*pod
	// shim is the shim installed in the node's CNI bin directory, named in its agent's configuration.
	shim string
}

// pod is a Pod on a node: its object, sandbox ID and network namespace.
type pod = framework.RuntimePod

// startNode builds a simulated Windows node (its Node object carrying a flannel annotation, as
// winnet's interop would publish), takes its snapshot, starts its agent, converges its node network
// and runs two Pods on it.
func startNode(t *testing.T, underlay *simnode.Underlay, name string, ip netip.Prefix, podCIDR string) *node {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	n := &node{Node: underlay.AddNode(t, name, ip, simnode.NodeOptions{StartOVS: true})}
	k := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows"},
			Annotations: map[string]string{controller.FlannelAnnotationPrefix + "backend-type": "vxlan"}},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
	}
	g.Expect(server.Client.Create(ctx, k)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), k) })
	var err error
	n.before, err = n.Snapshot()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.before.Bridges).To(BeEmpty())

	n.shim = framework.InstallShim(t)
	n.agent = framework.StartAgentWith(t, server, n.Node, framework.AgentOptions{CNIShimPath: n.shim})
	n.cni = framework.NewRuntimeWithBinDir(t, n.agent.CNIConfDir, filepath.Dir(n.shim))
	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs:     []networkv1alpha1.CIDR{networkv1alpha1.CIDR(podCIDR)},
			NodeIP:       networkv1alpha1.IPv4Address(ip.Addr().String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"},
		},
	}
	g.Expect(server.Client.Create(ctx, wnn)).To(Succeed())
	g.Eventually(n.cni.Reload).WithTimeout(converge).Should(Succeed(), "the agent writes the conflist once the node network is Ready")
	for i := range 2 {
		p := &pod{Namespace: "default", Name: fmt.Sprintf("%s-pod%d", name, i), Sandbox: fmt.Sprintf("%s-sandbox%d%s", name, i, strings.Repeat("0", 48))}
		p.Netns = "/run/netns/" + n.NS + fmt.Sprintf("-p%d", i)
		_, err := simnode.Exec("", "ip", "netns", "add", filepath.Base(p.Netns))
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", filepath.Base(p.Netns)) })
		obj := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}
		g.Expect(server.Client.Create(ctx, obj)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), obj, client.GracePeriodSeconds(0)) })
		p.UID = string(obj.UID)
		g.Expect(n.cni.Setup(ctx, *p)).To(Succeed())
		// containerd starts the sandbox once ADD returned: the endpoint's vNIC appears.
		g.Expect(hns.StartSandbox(n.agent.SandboxDir, p.Netns)).To(Succeed())
		t.Cleanup(func() { _ = hns.StopSandbox(n.agent.SandboxDir, p.Netns) })
		n.pods = append(n.pods, p)
	}
	g.Eventually(func(g Gomega) {
		peps := &networkv1alpha1.PodEndpointList{}
		g.Expect(server.Client.List(ctx, peps, client.InNamespace("default"))).To(Succeed())
		names := []string{}
		for _, p := range peps.Items {
			names = append(names, p.Spec.PodName)
		}
		g.Expect(names).To(ContainElements(n.pods[0].Name, n.pods[1].Name))
	}).WithTimeout(converge).Should(Succeed(), "the agent records the Pods' PodEndpoints")
	return n
}

// renderedChart renders the chart as helm would install it and returns its objects by kind/name.
func renderedChart(t *testing.T, values ...string) map[string][]byte {
	t.Helper()
	helm := filepath.Join(framework.RepoRoot(), "bin", "helm-v3.22.0", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm v3.22.0 not found at %s: run 'hack/setup-test-deps.sh' to build it: %v", helm, err)
	}
	args := []string{"template", "winnet", filepath.Join(framework.RepoRoot(), "config", "helm", "winnet"), "--namespace", ns}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	cmd := hostcmd.Command(helm, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	objs := map[string][]byte{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if m.Kind != "" {
			objs[m.Kind+"/"+m.Metadata.Name] = []byte(doc)
		}
	}
	return objs
}

func decode(t *testing.T, objs map[string][]byte, key string, into any) {
	t.Helper()
	b, ok := objs[key]
	if !ok {
		t.Fatalf("the chart renders no %s", key)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("decoding %s: %v", key, err)
	}
}

// buildController builds winnet-controller, the binary of the hook's image.
func buildController(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "winnet-controller")
	cmd := hostcmd.Command("go", "build", "-o", bin, "./cmd/winnet-controller")
	cmd.Dir = framework.RepoRoot()
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/winnet-controller: %v\n%s", err, out)
	}
	return bin
}

// TestHelmUninstallLeavesNoTrace installs winnet's workloads as the chart renders them (the API
// objects: nothing runs them but this test), runs two simulated Windows nodes with their agents and
// Pods and winnet-controller, then runs the chart's pre-delete hook command with its rendered
// arguments. Every winnet object, the CRDs and winnet's flannel annotations go; winnet-controller
// creates no WindowsNodeNetwork again; each node has its network back while its Pods still run; and
// once the runtime deleted the last Pod of a node, through the shim with no agent left, the node is
// as it was before winnet.
func TestHelmUninstallLeavesNoTrace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	admin, err := client.New(server.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	bin := buildController(t)

	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.40.0/24"))
	nodes := []*node{
		startNode(t, underlay, "win-u1", netip.MustParsePrefix("192.168.40.21/24"), "10.244.41.0/24"),
		startNode(t, underlay, "win-u2", netip.MustParsePrefix("192.168.40.22/24"), "10.244.42.0/24"),
	}
	// A Linux node running flannel keeps its annotations.
	linux := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "linux-u", Labels: map[string]string{corev1.LabelOSStable: "linux"},
		Annotations: map[string]string{controller.FlannelAnnotationPrefix + "backend-type": "vxlan"}}}
	g.Expect(admin.Create(ctx, linux)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), linux) })

	// winnet-controller, as the chart runs it in its namespace.
	mgr, err := controller.NewManager(server.Config, controller.Options{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", LeaderElectionNamespace: ns,
		Defaults: cluster.NetworkDefaults{ClusterCIDRs: []string{"10.244.0.0/16"}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	cctx, stopController := context.WithCancel(ctx)
	controllerDone := make(chan error, 1)
	go func() { controllerDone <- mgr.Start(cctx) }()
	t.Cleanup(func() { stopController(); <-controllerDone })
	for _, n := range nodes {
		g.Eventually(func(g Gomega) {
			w := &networkv1alpha1.WindowsNodeNetwork{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: n.Name}, w)).To(Succeed())
			g.Expect(w.Labels).To(HaveKeyWithValue(cluster.ManagedByLabel, cluster.ManagedByValue))
			c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(converge).Should(Succeed(), "winnet-controller adopted the WindowsNodeNetwork of %s", n.Name)
	}

	// The chart's workloads, as API objects; one agent Pod per node plays the DaemonSet's Pods, and
	// a goroutine plays kubelet: when the DaemonSet goes, the agents stop and their Pods go.
	objs := renderedChart(t, "uninstall.deleteCRDs=true")
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	dep, ds := &appsv1.Deployment{}, &appsv1.DaemonSet{}
	decode(t, objs, "Deployment/winnet-controller", dep)
	decode(t, objs, "DaemonSet/winnet-agent", ds)
	g.Expect(admin.Create(ctx, dep)).To(Succeed())
	g.Expect(admin.Create(ctx, ds)).To(Succeed())
	for _, n := range nodes {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winnet-agent-" + n.Name, Labels: ds.Spec.Template.Labels},
			Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "agent", Image: "winnet"}}}}
		g.Expect(admin.Create(ctx, p)).To(Succeed())
	}
	kubeletDone := make(chan struct{})
	go func() {
		defer close(kubeletDone)
		for {
			err := admin.Get(ctx, client.ObjectKeyFromObject(ds), &appsv1.DaemonSet{})
			if apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, n := range nodes {
			n.agent.Stop()
			_ = admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "winnet-agent-" + n.Name}}, client.GracePeriodSeconds(0))
		}
	}()

	// The hook's ClusterRole may delete exactly the CRDs the uninstall deletes (the hook below runs
	// with the admin's kubeconfig: its own rights are checked here).
	role := &rbacv1.ClusterRole{}
	decode(t, objs, "ClusterRole/winnet-uninstall", role)
	var crdNames []string
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "customresourcedefinitions") {
			crdNames = append(crdNames, r.ResourceNames...)
		}
	}
	g.Expect(crdNames).To(ConsistOf(controller.CRDNames), "the uninstall hook's ClusterRole names every CRD the uninstall deletes")

	// The hook: its Job's command line, against this API server.
	job := &batchv1.Job{}
	decode(t, objs, "Job/winnet-uninstall", job)
	g.Expect(job.Annotations).To(HaveKeyWithValue("helm.sh/hook", "pre-delete"))
	container := job.Spec.Template.Spec.Containers[0]
	g.Expect(container.Command).To(BeEmpty(), "the hook runs the image's entrypoint, winnet-controller")
	var out bytes.Buffer
	hook := hostcmd.Command(bin, append(container.Args, "--kubeconfig="+server.KubeconfigPath)...)
	hook.Stdout, hook.Stderr = &out, &out
	start := time.Now()
	g.Expect(hook.Run()).To(Succeed(), "winnet-controller %s:\n%s", strings.Join(container.Args, " "), &out)
	t.Logf("the uninstall hook took %s:\n%s", time.Since(start).Round(time.Millisecond), &out)
	<-kubeletDone
	for _, n := range nodes {
		g.Expect(out.String()).To(ContainSubstring("node %s: network given back", n.Name))
	}

	t.Run("no winnet object is left, nor the CRDs, nor winnet's flannel annotations", func(t *testing.T) {
		g := NewWithT(t)
		for _, name := range controller.CRDNames {
			err := admin.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CRD %s is gone: %v", name, err)
		}
		for _, n := range nodes {
			k := &corev1.Node{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: n.Name}, k)).To(Succeed())
			g.Expect(k.Annotations).NotTo(HaveKey(HavePrefix(controller.FlannelAnnotationPrefix)))
		}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(linux), linux)).To(Succeed())
		g.Expect(linux.Annotations).To(HaveKey(controller.FlannelAnnotationPrefix+"backend-type"), "flannel's own node keeps its record")
		err := admin.Get(ctx, client.ObjectKeyFromObject(ds), &appsv1.DaemonSet{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the agents' DaemonSet is gone")
		// The Lease that stops winnet-controller goes with its Deployment (garbage collector).
		lease := &coordinationv1.Lease{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.UninstallLeaseName}, lease)).To(Succeed())
		g.Expect(lease.OwnerReferences).To(ConsistOf(HaveField("UID", dep.UID)))
	})

	t.Run("each node has its network back while its Pods still run", func(t *testing.T) {
		g := NewWithT(t)
		for _, n := range nodes {
			after, err := n.Snapshot()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after).To(Equal(n.before), "node %s", n.Name)
			_, err = n.agent.HNS.GetNetworkByName(ctx, "winnet")
			g.Expect(err).To(MatchError(hns.ErrNotFound))
			g.Expect(filepath.Join(n.agent.CNIConfDir, cni.ConfListName)).To(BeAnExistingFile(),
				"node %s keeps its conflist while sandboxes are left: without it containerd fails their DEL", n.Name)
		}
	})

	t.Run("the runtime deletes the Pods through the shim with no agent; the last one takes the conflist, the state and the installed shim", func(t *testing.T) {
		g := NewWithT(t)
		built := filepath.Join(framework.BuildShim(t), cni.PluginType)
		for _, n := range nodes {
			confList := filepath.Join(n.agent.CNIConfDir, cni.ConfListName)
			for i, p := range n.pods {
				g.Expect(hns.StopSandbox(n.agent.SandboxDir, p.Netns)).To(Succeed())
				g.Expect(n.cni.Remove(ctx, *p)).To(Succeed(), "DEL of %s with no agent", p.Name)
				if i < len(n.pods)-1 {
					g.Expect(confList).To(BeAnExistingFile(), "a sandbox is left on %s", n.Name)
					g.Expect(n.shim).To(BeAnExistingFile(), "a sandbox is left on %s: its DEL runs the shim", n.Name)
				}
			}
			g.Expect(n.shim).NotTo(BeAnExistingFile(), "the shim winnet installed on %s goes with its last sandbox", n.Name)
			g.Expect(built).To(BeAnExistingFile(), "the build output the other tests run is not the agent's to remove")
			g.Expect(n.cni.Reload()).To(MatchError(ContainSubstring("no network config found")), "the runtime has no winnet network on %s any more", n.Name)
			files, err := simnode.Files(n.agent.StateDir, n.agent.CNIConfDir, filepath.Dir(n.shim))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(files).To(BeEmpty(), "node %s holds no file of winnet's", n.Name)
			after, err := n.Snapshot()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after).To(Equal(n.before), "node %s is as it was before winnet", n.Name)
		}
	})
}
