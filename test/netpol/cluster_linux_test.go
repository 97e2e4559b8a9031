//go:build linux

package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "NetworkPolicy conformance tests (cyclonus)", &server, framework.MainOptions{})
}

// The cluster cyclonus expects: namespaces x, y, z labelled ns=<name>, Pods a, b, c in each
// labelled pod=<name>, each serving TCP and UDP on ports 80 and 81 in containers whose ports are
// named serve-<port>-<protocol> (cyclonus's probe.NewDefaultPod). SCTP is not served: winnet
// refuses it on Windows.
var (
	namespaces = []string{"x", "y", "z"}
	podNames   = []string{"a", "b", "c"}
	ports      = []int{80, 81}
	protocols  = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}
)

// syncNamespace holds the sentinel Pods and policy (see cluster.sync); cyclonus never looks at it.
const syncNamespace = "winnet-sync"

// converge bounds how long a node takes to start and how long the agents take to realise a step.
const converge = 60 * time.Second

// cluster is two simulated Windows nodes with their agents, the cyclonus Pods spread over them
// (same-node and cross-node cells both occur), and a sentinel Pod on each.
type cluster struct {
	t     *testing.T
	nodes []*framework.PodNode
	// pods are the cyclonus Pods by "ns/name", and the node each runs on.
	pods   map[string]*framework.TestPod
	nodeOf map[string]*framework.PodNode
	// namespaces are the namespaces cyclonus knows now (x, y, z and those a case created).
	namespaces []string
	sentinels  []*framework.TestPod
	syncStep   int
	placed     int
	// reprobed counts the cells probed a second time because the first probe disagreed.
	reprobed int
}

func podKey(ns, name string) string { return ns + "/" + name }

// startCluster builds the cluster; it fails the test if anything does not come up.
func startCluster(t *testing.T) *cluster {
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.71.0/24"))
	c := &cluster{t: t, pods: map[string]*framework.TestPod{}, nodeOf: map[string]*framework.PodNode{}}
	c.nodes = []*framework.PodNode{
		framework.StartPodNode(t, server, u, "cy-a", "192.168.71.11/24", "10.244.71.0/24", converge),
		framework.StartPodNode(t, server, u, "cy-b", "192.168.71.12/24", "10.244.72.0/24", converge),
	}
	for _, n := range c.nodes {
		n.Route(t)
		// A cell is judged by the OpenFlow tables the agent wrote, not by a datapath flow cached
		// before them: see ExactMatchDatapath (OVS 3.1.0 can keep a stale megaflow; Windows' datapath
		// has none).
		n.OVS.ExactMatchDatapath(t)
	}
	for _, ns := range append(slices.Clone(namespaces), syncNamespace) {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"ns": ns}}}
		if err := server.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	c.namespaces = slices.Clone(namespaces)
	for i, n := range c.nodes {
		p := n.AddPod(t, fmt.Sprintf("sentinel-%d", i), framework.TestPodOptions{Namespace: syncNamespace, Labels: map[string]string{"sync": "0"}})
		c.sentinels = append(c.sentinels, p)
	}
	for _, ns := range namespaces {
		for _, name := range podNames {
			c.addPod(ns, name, map[string]string{"pod": name})
		}
	}
	sentinel := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: "sentinel"}}
	if err := server.Client.Create(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	c.sync()
	return c
}

// addPod attaches a cyclonus Pod on the next node in turn and serves its ports.
func (c *cluster) addPod(ns, name string, labels map[string]string) {
	n := c.nodes[c.placed%len(c.nodes)]
	c.placed++
	var cports []corev1.ContainerPort
	for _, port := range ports {
		for _, proto := range protocols {
			cports = append(cports, corev1.ContainerPort{Name: fmt.Sprintf("serve-%d-%s", port, strings.ToLower(string(proto))),
				ContainerPort: int32(port), Protocol: proto})
		}
	}
	p := n.AddPod(c.t, name, framework.TestPodOptions{Namespace: ns, Labels: labels, Ports: cports})
	for _, port := range ports {
		framework.Serve(c.t, p.NS, podKey(ns, name), port)
	}
	c.pods[podKey(ns, name)] = p
	c.nodeOf[podKey(ns, name)] = n
}

// deletePod deletes a cyclonus Pod as kubelet and the runtime would.
func (c *cluster) deletePod(ctx context.Context, ns, name string) error {
	k := podKey(ns, name)
	p, ok := c.pods[k]
	if !ok {
		return fmt.Errorf("no Pod %s", k)
	}
	if err := c.nodeOf[k].DeletePod(ctx, p); err != nil {
		return err
	}
	delete(c.pods, k)
	delete(c.nodeOf, k)
	return nil
}

// reset brings the cluster back to cyclonus's initial state between cases: no policy, the
// original labels, only the original namespaces and Pods (as cyclonus's ResetClusterState).
func (c *cluster) reset(ctx context.Context) error {
	for k := range c.pods {
		ns, name, _ := strings.Cut(k, "/")
		if !slices.Contains(namespaces, ns) || !slices.Contains(podNames, name) {
			if err := c.deletePod(ctx, ns, name); err != nil {
				return err
			}
		}
	}
	for _, ns := range c.namespaces {
		if !slices.Contains(namespaces, ns) {
			if err := client.IgnoreNotFound(server.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})); err != nil {
				return err
			}
		}
	}
	c.namespaces = slices.Clone(namespaces)
	for _, ns := range namespaces {
		if err := server.Client.DeleteAllOf(ctx, &networkingv1.NetworkPolicy{}, client.InNamespace(ns)); err != nil {
			return err
		}
		if err := c.setNamespaceLabels(ctx, ns, map[string]string{"ns": ns}); err != nil {
			return err
		}
		for _, name := range podNames {
			if err := c.setPodLabels(ctx, ns, name, map[string]string{"pod": name}); err != nil {
				return err
			}
		}
	}
	return nil
}

// setNamespaceLabels replaces a namespace's labels (the API server keeps kubernetes.io/metadata.name).
func (c *cluster) setNamespaceLabels(ctx context.Context, ns string, labels map[string]string) error {
	obj := &corev1.Namespace{}
	if err := server.Client.Get(ctx, client.ObjectKey{Name: ns}, obj); err != nil {
		return err
	}
	obj.Labels = labels
	return server.Client.Update(ctx, obj)
}

// setPodLabels replaces a Pod's labels.
func (c *cluster) setPodLabels(ctx context.Context, ns, name string, labels map[string]string) error {
	obj := &corev1.Pod{}
	if err := server.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		return err
	}
	obj.Labels = labels
	return server.Client.Update(ctx, obj)
}

// marker is the address the sentinel policy's ipBlock names at sync step n.
func marker(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{100, 64, byte(n >> 8), byte(n)})
}

// sync waits until both agents have realised everything written to the API server so far, and
// reports them ready. It writes, after the case's own changes, a new step number into the labels of
// the sentinel Pods and of their namespace and into the sentinel policy (in that order), then waits
// until each node's switch holds that step's rule: one conjunction whose source clause has both the
// policy's new ipBlock address and both sentinel Pods' addresses (selected only by the new labels
// of Pod and namespace). Each informer delivers its kind's changes in order, so the agent's pass
// that saw the three sentinel changes saw every change of the case before them; the switch gets a
// pass's flows in one bundle.
func (c *cluster) sync() {
	t := c.t
	t.Helper()
	ctx := context.Background()
	c.syncStep++
	step := strconv.Itoa(c.syncStep)
	for _, p := range c.sentinels {
		if err := c.setPodLabels(ctx, p.Namespace, p.Name, map[string]string{"sync": step}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.setNamespaceLabels(ctx, syncNamespace, map[string]string{"sync": step}); err != nil {
		t.Fatal(err)
	}
	np := &networkingv1.NetworkPolicy{}
	if err := server.Client.Get(ctx, client.ObjectKey{Namespace: syncNamespace, Name: "sentinel"}, np); err != nil {
		t.Fatal(err)
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"sync": step}}
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: sel, PodSelector: sel},
		{IPBlock: &networkingv1.IPBlock{CIDR: marker(c.syncStep).String() + "/32"}},
	}}}
	if err := server.Client.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{marker(c.syncStep)}
	for _, p := range c.sentinels {
		want = append(want, p.IP)
	}
	deadline := time.Now().Add(converge)
	for _, n := range c.nodes {
		for {
			flows, err := n.OVS.DumpFlows(networkv1alpha1.DefaultBridgeName, fmt.Sprintf("table=%d", pipeline.IngressRuleTable))
			if err == nil && sourceClauseHas(flows, want) && policiesReady(ctx, n.Name) {
				break
			}
			if time.Now().After(deadline) {
				// The agents run in this process: what each goroutine waits on says where the
				// pass stopped (the log only says that nothing happened).
				fmt.Printf("goroutines when node %s missed sync step %d:\n", n.Name, c.syncStep)
				_ = pprof.Lookup("goroutine").WriteTo(os.Stdout, 2)
				t.Fatalf("node %s did not realise sync step %d within %v (sources %v in one rule, PoliciesReady); its table %d: %v\n%s",
					n.Name, c.syncStep, converge, want, pipeline.IngressRuleTable, err, strings.Join(flows, "\n"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

var conjRE = regexp.MustCompile(`conjunction\((\d+),1/[23]\)`)

// sourceClauseHas reports whether one ingress conjunction has every address of want in its source
// clause (clause 1 in table IngressRule).
func sourceClauseHas(flows []string, want []netip.Addr) bool {
	var common map[string]bool
	for _, addr := range want {
		ids := map[string]bool{}
		for _, f := range flows {
			if strings.Contains(f, "nw_src="+addr.String()+" ") || strings.Contains(f, "nw_src="+addr.String()+",") {
				for _, m := range conjRE.FindAllStringSubmatch(f, -1) {
					if common == nil || common[m[1]] {
						ids[m[1]] = true
					}
				}
			}
		}
		if len(ids) == 0 {
			return false
		}
		common = ids
	}
	return true
}

// policiesReady reports whether the node's WindowsNodeNetwork says PoliciesReady.
func policiesReady(ctx context.Context, node string) bool {
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := server.Client.Get(ctx, client.ObjectKey{Name: node}, wnn); err != nil {
		return false
	}
	return meta.IsStatusConditionTrue(wnn.Status.Conditions, networkv1alpha1.PoliciesReadyCondition)
}
