//go:build linux && bench

package scale

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet/controllers/networkpolicy"
)

// The cluster's shape: one Service and one policy per six Pods (10,000 of each at 60,000 Pods, the
// issue's goals), at most 10,000 Services (Kubernetes' threshold); 30 Pods per Node (150,000 Pods
// on 5,000 Nodes); 60 Pods per Namespace; five endpoints per Service.
const (
	podsPerNode      = 30
	podsPerNamespace = 60
	podsPerService   = 6
	maxServices      = 10000
	endpointsPerSvc  = 5
	// localNamespaces hold the agents' local Pods (one per namespace per agent).
	localNamespaces = 30
	// teams label the namespaces; a policy's peers are the role=peer Pods of one team's namespaces.
	teams = 10
	// peerPods: the role=peer Pods are among the first peerPods object Pods.
	peerPods = 3000
	protobuf = "application/vnd.kubernetes.protobuf"
)

// writers is how many objects are written at once (BENCH_SCALE_WRITERS). More do not write faster
// when the API server has the machine's cores (bench-scale-info's cores while writing say).
var writers = 48

// retried counts the requests retried after the API server's throttling (429) or a timeout.
var retried atomic.Int64

// etcdArgs raise etcd's database quota from its default 2 GiB to 8 GiB (etcd's largest
// recommended): 150,000 Pods with their status writes, 5,000 Nodes with their heartbeats and the
// revisions kept until the API server's compaction (every 5 minutes) come near the default.
var etcdArgs = map[string]string{"quota-backend-bytes": strconv.Itoa(8 << 30)}

// proxiedBy is kube-proxy's selector of the Services and EndpointSlices it serves, which the agent
// uses too (internal/agent.proxiedBy).
const proxiedBy = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"

// shape is what the cluster holds at one size.
type shape struct {
	pods, nodes, namespaces, services, policies int
}

func shapeOf(pods int) shape {
	s := shape{pods: pods, nodes: (pods + podsPerNode - 1) / podsPerNode, namespaces: max(localNamespaces, pods/podsPerNamespace)}
	s.services = min(maxServices, pods/podsPerService)
	s.policies = min(maxServices, pods/podsPerService)
	return s
}

// maxPerNode is the most Pods an object Node's /24 holds (from its third address).
const maxPerNode = 253

// fixedShape is what the cluster holds at every size when only Pods grow (BENCH_SCALE_FIXED=1):
// the first size's Nodes, Namespaces, Services and policies, with the largest size's Pods spread
// on those Nodes; it returns the Pods per Node.
func fixedShape(sizes []int) (shape, int, error) {
	s := shapeOf(sizes[0])
	perNode := (sizes[len(sizes)-1] + s.nodes - 1) / s.nodes
	if perNode > maxPerNode {
		return s, 0, fmt.Errorf("BENCH_SCALE_FIXED holds the first size's %d Nodes, which hold at most %d Pods each: %d Pods need a first size of at least %d",
			s.nodes, maxPerNode, sizes[len(sizes)-1], (sizes[len(sizes)-1]+maxPerNode-1)/maxPerNode*podsPerNode)
	}
	if s.namespaces <= localNamespaces {
		return s, 0, fmt.Errorf("BENCH_SCALE_FIXED needs namespaces beyond the %d local ones: a first size of at least %d Pods", localNamespaces,
			(localNamespaces+1)*podsPerNamespace)
	}
	return s, perNode, nil
}

// writer writes the cluster's objects with protobuf, without client-side rate limiting.
type writer struct {
	cs *kubernetes.Clientset
	// built is what exists now; steps what each grow built (a Service's namespace depends on the
	// namespace count when it was created).
	built shape
	steps []shape
	// podsUpTo is, for each step, how many object Pods existed after it (a Pod's namespace depends
	// on the namespace count when it was written).
	podsUpTo []int
	// churned counts the churn Pods ever created, epChanges the endpoint changes.
	churned, epChanges atomic.Int64
	// nodes is how many object Nodes exist (for the heartbeats).
	nodes atomic.Int64
	// perNode is how many object Pods each object Node holds (podsPerNode, or more when only
	// Pods grow). fixedFrom, when not zero, is the first object Pod written after the first size
	// when only Pods grow: it and the later ones go to the namespaces without local Pods, so that
	// the local namespaces (and the peers of the local policies there) stay as the first size
	// left them.
	perNode, fixedFrom int
}

func newWriter(cfg *rest.Config) (*writer, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType, cfg.AcceptContentTypes = protobuf, protobuf+",application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the writers' client: %w", err)
	}
	return &writer{cs: cs, perNode: podsPerNode}, nil
}

// parallel runs f(i) for i in [from, to) on writers goroutines and returns the first error.
func parallel(from, to int, f func(i int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := retry(func() error { return f(i) }); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// retry retries f on the API server's throttling and timeouts (it takes as much as it can).
func retry(f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || attempt == 20 || !(apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)) {
			return err
		}
		retried.Add(1)
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
}

func nsName(i int) string   { return fmt.Sprintf("ns-%04d", i) }
func nodeName(i int) string { return fmt.Sprintf("obj-%05d", i) }

// addrAt is base + n.
func addrAt(base netip.Addr, n int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(base.AsSlice())+uint32(n))
	return netip.AddrFrom4(b)
}

// Object Nodes' Pod CIDRs are /24s from objPodBase (inside the cluster CIDR 100.64.0.0/10), their
// node IPs from objNodeBase.
var (
	objPodBase  = netip.MustParseAddr("100.65.0.0")
	objNodeBase = netip.MustParseAddr("172.20.0.10")
	burstBase   = netip.MustParseAddr("100.127.0.0")
	churnBase   = netip.MustParseAddr("100.124.0.0")
)

// podIP is the address of object Pod k: the (k%perNode+2)-th of its Node's /24.
func (w *writer) podIP(k int) netip.Addr { return addrAt(objPodBase, (k/w.perNode)*256+k%w.perNode+2) }

// podNode is the Node of object Pod k.
func (w *writer) podNode(k int) string { return nodeName(k / w.perNode) }

// podNamespace is the namespace of object Pod k, when the cluster has namespaces namespaces.
func (w *writer) podNamespace(k, namespaces int) string {
	if w.fixedFrom > 0 && k >= w.fixedFrom {
		return nsName(localNamespaces + k%(namespaces-localNamespaces))
	}
	return nsName(k % namespaces)
}

// kindWrite is how many objects of one kind a grow wrote and how long that took.
type kindWrite struct {
	kind    string
	objects int
	took    time.Duration
	// cpu is the benchmark's processes' CPU time before and after.
	cpuBefore, cpuAfter cpuSnapshot
}

// perSecond is the kind's objects written per second.
func (k kindWrite) perSecond() float64 {
	if k.took <= 0 {
		return 0
	}
	return float64(k.objects) / k.took.Seconds()
}

// writeRates says, per kind written, the objects written per second, how many and in how long.
func writeRates(ks []kindWrite) string {
	var out []string
	for _, k := range ks {
		if k.objects > 0 {
			out = append(out, fmt.Sprintf("%s_per_s=%.1f (%d in %v)", k.kind, k.perSecond(), k.objects, k.took.Round(100*time.Millisecond)))
		}
	}
	return strings.Join(out, " ")
}

// podNamespaceOf is the namespace object Pod k was written to.
func (w *writer) podNamespaceOf(k int) string {
	for i, upTo := range w.podsUpTo {
		if k < upTo {
			return w.podNamespace(k, w.steps[i].namespaces)
		}
	}
	return w.podNamespace(k, w.built.namespaces)
}

// grow writes what the cluster lacks to reach s, in dependency order, and returns what it wrote of
// each kind (a Pod is its creation and its status, a Node its creation and its status, a Service
// its creation and its EndpointSlice's).
func (w *writer) grow(ctx context.Context, s shape, objectPods int) ([]kindWrite, error) {
	b := w.built
	var out []kindWrite
	step := func(kind string, from, to int, f func(i int) error) error {
		before, start := takeCPU(), time.Now()
		err := parallel(from, to, f)
		out = append(out, kindWrite{kind: kind, objects: max(0, to-from), took: time.Since(start), cpuBefore: before, cpuAfter: takeCPU()})
		if err != nil {
			return fmt.Errorf("writing %s %d to %d: %w", kind, from, to, err)
		}
		return nil
	}
	if err := step("namespaces", b.namespaces, s.namespaces, func(i int) error { return w.namespace(ctx, i) }); err != nil {
		return out, err
	}
	if err := step("nodes", b.nodes, s.nodes, func(i int) error { return w.node(ctx, i) }); err != nil {
		return out, err
	}
	w.nodes.Store(int64(s.nodes))
	objectBefore := max(0, b.pods-(s.pods-objectPods))
	if b.pods == 0 {
		objectBefore = 0
	}
	if err := step("pods", objectBefore, objectPods, func(k int) error { return w.pod(ctx, k, s.namespaces) }); err != nil {
		return out, err
	}
	if err := step("services", b.services, s.services, func(i int) error { return w.service(ctx, i, s.namespaces, objectPods) }); err != nil {
		return out, err
	}
	if err := step("policies", b.policies, s.policies, func(i int) error { return w.policy(ctx, i, s.namespaces) }); err != nil {
		return out, err
	}
	w.built = s
	w.steps = append(w.steps, s)
	w.podsUpTo = append(w.podsUpTo, objectPods)
	w.built.pods = objectPods
	return out, nil
}

func (w *writer) namespace(ctx context.Context, i int) error {
	env := "prod"
	if i%3 == 0 {
		env = "dev"
	}
	_, err := w.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i),
		Labels: map[string]string{"team": fmt.Sprintf("t%d", i%teams), "env": env}}}, metav1.CreateOptions{})
	return ignoreExists(err)
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// nodeReady is the Ready condition a kubelet posts, heartbeat now.
func nodeReady() corev1.NodeCondition {
	now := metav1.Now()
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status (bench-scale)", LastHeartbeatTime: now, LastTransitionTime: now}
}

// node creates object Node i with its Pod CIDR and its status as kubelet registers it.
func (w *writer) node(ctx context.Context, i int) error {
	return w.nodeAt(ctx, nodeName(i), netip.PrefixFrom(addrAt(objPodBase, i*256), 24), addrAt(objNodeBase, i))
}

// nodeAt creates Node name with Pod CIDR cidr, then writes its status (InternalIP ip, Ready) as
// kubelet registers a node.
func (w *writer) nodeAt(ctx context.Context, name string, cidr netip.Prefix, ip netip.Addr) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"}},
		Spec: corev1.NodeSpec{PodCIDR: cidr.String(), PodCIDRs: []string{cidr.String()}}}
	if _, err := w.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	// A patch: node lifecycle (kube-controller-manager) writes the Node too.
	status, err := json.Marshal(map[string]any{"status": corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}},
		Conditions: []corev1.NodeCondition{nodeReady()},
	}})
	if err != nil {
		return err
	}
	_, err = w.cs.CoreV1().Nodes().PatchStatus(ctx, name, status)
	return err
}

// heartbeat writes Node i's Ready heartbeat as kubelet's status update does.
func (w *writer) heartbeat(ctx context.Context, i int) error {
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339))
	_, err := w.cs.CoreV1().Nodes().PatchStatus(ctx, nodeName(i), []byte(patch))
	return err
}

// podLabels: app a0-a4 (what policies select), role peer for one Pod in ten of the first
// peerPods (policies' peers: the same 300 at every size, so that the sizes differ in the Pods no
// local policy names, issue 38's goal).
func podLabels(k int) map[string]string {
	role := "other"
	if k%10 == 0 && k < peerPods {
		role = "peer"
	}
	return map[string]string{"app": fmt.Sprintf("a%d", k%5), "role": role, "pod-template-hash": fmt.Sprintf("h%d", k/10)}
}

// pod creates object Pod k on its Node and writes its status as kubelet does once it runs.
func (w *writer) pod(ctx context.Context, k, namespaces int) error {
	return w.podAt(ctx, w.podNamespace(k, namespaces), fmt.Sprintf("p-%06d", k), w.podNode(k), w.podIP(k), podLabels(k))
}

func (w *writer) podAt(ctx context.Context, ns, name, node string, ip netip.Addr, labels map[string]string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: node,
			// The object Nodes have no kubelet: nothing may evict their Pods.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}},
		},
	}
	created, err := w.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}, HostIP: "172.20.0.1", StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}
	for {
		_, err = w.cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
		// Written meanwhile (kube-controller-manager): write the status over the latest.
		status := created.Status
		if created, err = w.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		created.Status = status
	}
}

// headless: one Service in twenty has no ClusterIP (kube-proxy and the agent skip its slices).
func headless(i int) bool { return i%20 == 19 }

func svcName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// service creates Service i (selectorless) and its EndpointSlice, whose endpoints are five object
// Pods' addresses, as the endpoint slice controller would write them.
func (w *writer) service(ctx context.Context, i, namespaces, objectPods int) error {
	ns := nsName(i % namespaces)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName(i)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	sliceLabels := map[string]string{discoveryv1.LabelServiceName: svcName(i), discoveryv1.LabelManagedBy: "bench-scale"}
	if headless(i) {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		sliceLabels[corev1.IsHeadlessService] = ""
	}
	if _, err := w.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svcName(i) + "-1", Labels: sliceLabels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for e := range endpointsPerSvc {
		k := (i*endpointsPerSvc + e) % objectPods
		slice.Endpoints = append(slice.Endpoints, endpoint(w.podIP(k), w.podNode(k)))
	}
	_, err := w.cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	return ignoreExists(err)
}

func endpoint(ip netip.Addr, node string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip.String()}, NodeName: ptr.To(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
}

// svcNamespaces is the namespace count when Service i was created.
func (w *writer) svcNamespaces(i int) int {
	for _, s := range w.steps {
		if i < s.services {
			return s.namespaces
		}
	}
	return w.built.namespaces
}

// changeEndpoint replaces the first endpoint of Service i's slice with an address never used.
func (w *writer) changeEndpoint(ctx context.Context, i, namespaces int) error {
	ns := nsName(i % namespaces)
	n := int(w.epChanges.Add(1))
	return retry(func() error {
		s, err := w.cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, svcName(i)+"-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Endpoints[0] = endpoint(addrAt(churnBase, 1<<16+n), nodeName(0))
		_, err = w.cs.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
}

// touchStatus writes Pod ns/name's status as kubelet does when a probe flips: its Ready condition,
// true on even i, false on odd.
func (w *writer) touchStatus(ctx context.Context, ns, name string, i int) error {
	return retry(func() error {
		p, err := w.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		status := corev1.ConditionTrue
		if i%2 == 1 {
			status = corev1.ConditionFalse
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
		_, err = w.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

// peerWatches are the Pod watches of an agent's peers: those of the policies of the local
// namespaces (every agent has a Pod in each), as the agent computes them.
func (w *writer) peerWatches(ctx context.Context) ([]networkpolicy.PodWatch, error) {
	var policies []networkingv1.NetworkPolicy
	for i := range localNamespaces {
		l, err := w.cs.NetworkingV1().NetworkPolicies(nsName(i)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		policies = append(policies, l.Items...)
	}
	nss, err := w.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	labels := map[string]map[string]string{}
	for _, ns := range nss.Items {
		labels[ns.Name] = ns.Labels
	}
	return networkpolicy.PeerWatches(policies, labels), nil
}

// policy creates NetworkPolicy i: in namespace i%namespaces, it selects app a<i%5> and admits TCP
// port 80+i%20 from the role=peer Pods of team t<i%10>'s namespaces; one in four also limits
// egress to app a<(i+1)%5> of its namespace on UDP 53.
func (w *writer) policy(ctx context.Context, i, namespaces int) error {
	ns := nsName(i % namespaces)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("np-%05d", i)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", i%5)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i%teams)}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "peer"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(80 + i%20)))}},
			}},
		},
	}
	if i%4 == 3 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", (i+1)%5)}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))}},
		}}
	}
	_, err := w.cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
	return ignoreExists(err)
}

// probePolicy selects app a0 of namespace ns-0000 (every agent has a Pod there) from its role=peer
// Pods on a port of its own.
func probePolicy(name string, port int32, from map[string]string, ns string, app string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: from}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}},
			}},
		},
	}
}

// churn writes, until ctx ends, perSecond Pods created (with their status) and as many deleted per
// second, and slicesPerSecond EndpointSlice changes, and returns the writes it made.
func (w *writer) churn(ctx context.Context, perSecond, slicesPerSecond int) (int, error) {
	var writes atomic.Int64
	var errs []error
	var mu sync.Mutex
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var wg sync.WaitGroup
	// created are the churn Pods written (status included), the oldest first: only those are
	// deleted, a second or more later.
	var created []string
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return int(writes.Load()), errors.Join(errs...)
		case <-tick.C:
		}
		for range perSecond {
			k := int(w.churned.Add(1))
			name := fmt.Sprintf("churn-%06d", k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := w.podAt(ctx, nsName(k%w.built.namespaces), name, nodeName(k%w.built.nodes), addrAt(churnBase, k), podLabels(k))
				fail(err)
				writes.Add(2)
				if err == nil {
					mu.Lock()
					created = append(created, name)
					mu.Unlock()
				}
			}()
		}
		mu.Lock()
		var deleting []string
		if len(created) > perSecond {
			deleting = append(deleting, created[:perSecond]...)
			created = created[perSecond:]
		}
		mu.Unlock()
		for _, name := range deleting {
			k := 0
			_, _ = fmt.Sscanf(name, "churn-%06d", &k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := w.cs.CoreV1().Pods(nsName(k%w.built.namespaces)).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				if !apierrors.IsNotFound(err) {
					fail(err)
				}
				writes.Add(1)
			}()
		}
		for j := range slicesPerSecond {
			i := (n*slicesPerSecond + j) % w.built.services
			if headless(i) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				fail(w.changeEndpoint(ctx, i, w.svcNamespaces(i)))
				writes.Add(1)
			}()
		}
	}
}

// heartbeats patches every object Node's Ready heartbeat once per period, spread evenly, until ctx
// ends.
func (w *writer) heartbeats(ctx context.Context, period time.Duration) {
	for i := 0; ctx.Err() == nil; i++ {
		n := int(w.nodes.Load())
		if n == 0 {
			time.Sleep(time.Second)
			continue
		}
		i %= n
		_ = w.heartbeat(ctx, i)
		select {
		case <-ctx.Done():
		case <-time.After(period / time.Duration(n)):
		}
	}
}
