//go:build linux && bench

package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// controllerResult is one size's bench-scale-controller line.
type controllerResult struct {
	pods, nodes                  int
	heapMB, rssMB                float64
	growCPU, idleCPU, idleWrites float64
	// writesPerNode is the controller's writes while the size was built per Node it added (-1 when
	// it added none).
	writesPerNode float64
	// queueGrow is the largest reconcile queue depth (every controller's together) sampled while
	// the size was written; queueIdle the depth at the end of the idle window.
	queueGrow, queueIdle float64
	// routeConverge is the time from a new Node's creation until its route's flow is in every
	// agent's switch.
	routeConverge time.Duration
}

func (r controllerResult) String() string {
	return fmt.Sprintf("bench-scale-controller pods=%d nodes=%d controller_heap_mb=%.0f controller_rss_mb=%.0f controller_grow_cpu_pct=%.1f "+
		"controller_idle_cpu_pct=%.1f controller_idle_writes_per_min=%.1f controller_writes_per_node_added=%.2f "+
		"controller_queue_max_growing=%.0f controller_queue_idle=%.0f route_converge_ms=%.0f",
		r.pods, r.nodes, r.heapMB, r.rssMB, r.growCPU, r.idleCPU, r.idleWrites, r.writesPerNode, r.queueGrow, r.queueIdle,
		float64(r.routeConverge.Microseconds())/1000)
}

// controllerProbe reads winnet-controller: its process, its loopback profiler and its metrics
// endpoint (HTTPS, with the token of a ServiceAccount allowed get on /metrics).
type controllerProbe struct {
	c       *cluster.Cluster
	pprof   string
	metrics string
	reader  *framework.MetricsReader
}

// newControllerProbe lets the controller's ServiceAccount review the tokens of its metrics
// endpoint's callers (what the chart grants it when controller.metricsPort is set; the harness
// renders the chart's defaults, metrics off) and creates the metrics reader.
func newControllerProbe(ctx context.Context, c *cluster.Cluster, cfg *rest.Config, pprof, metrics string) (*controllerProbe, error) {
	const name = "bench-scale-controller-metrics"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: cluster.ControllerServiceAccount, Namespace: cluster.AgentNamespace}}}
	if err := c.Client.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("letting winnet-controller review its metrics callers' tokens: %w", err)
	}
	if err := c.Client.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("letting winnet-controller review its metrics callers' tokens: %w", err)
	}
	reader, err := (&framework.APIServer{Config: cfg}).NewMetricsReader(ctx)
	if err != nil {
		return nil, err
	}
	return &controllerProbe{c: c, pprof: pprof, metrics: metrics, reader: reader}, nil
}

// pid is the controller's pid; the test fails when it does not run.
func (p *controllerProbe) pid(t *testing.T) int {
	t.Helper()
	pid := p.c.ControllerPID()
	if pid == 0 {
		t.Fatalf("winnet-controller is not running:\n%s", p.c.LogTails(40))
	}
	return pid
}

// queueDepth is the sum of controller-runtime's workqueue_depth over the controller's queues, and
// the deepest queue's labels ("" when every queue is empty).
func (p *controllerProbe) queueDepth(ctx context.Context) (float64, string, error) {
	body, err := p.reader.Scrape(ctx, p.metrics)
	if err != nil {
		return 0, "", fmt.Errorf("winnet-controller's metrics: %w", err)
	}
	var sum, deepest float64
	name, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "workqueue_depth{") {
			continue
		}
		found = true
		labels, value, _ := strings.Cut(line, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, "", fmt.Errorf("winnet-controller's metrics: %q: %w", line, err)
		}
		sum += v
		if v > deepest {
			deepest, name = v, labels[len("workqueue_depth{"):]
		}
	}
	if !found {
		return 0, "", fmt.Errorf("winnet-controller's metrics have no workqueue_depth")
	}
	return sum, name, nil
}

// waitQueuesEmpty waits until every queue of the controller is empty (at most limit) and returns
// how long that took: at thousands of Nodes its rate limit (--kube-api-qps) makes it finish the
// routes after the agents settled, and the idle window must not count those writes.
func (p *controllerProbe) waitQueuesEmpty(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		d, _, err := p.queueDepth(ctx)
		if err != nil {
			return time.Since(start), err
		}
		if d == 0 || time.Since(start) > limit {
			if d != 0 {
				fmt.Printf("bench-scale-info: winnet-controller's queues still held %.0f items after %v; measuring anyway\n", d, limit)
			}
			return time.Since(start), nil
		}
		time.Sleep(time.Second)
	}
}

// queueSampleEvery is how often the controller's queue depth is sampled while a size is built:
// each scrape costs the controller a page of metrics that grows with the Nodes.
const queueSampleEvery = 5 * time.Second

// queueSampler samples the controller's queue depth every queueSampleEvery until stopped and keeps
// the largest.
type queueSampler struct {
	mu       sync.Mutex
	max      float64
	maxWhich string
	samples  int
	err      error
	stop     context.CancelFunc
	done     chan struct{}
}

func (p *controllerProbe) sampleQueue(ctx context.Context) *queueSampler {
	ctx, stop := context.WithCancel(ctx)
	s := &queueSampler{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			d, which, err := p.queueDepth(ctx)
			s.mu.Lock()
			switch {
			case err != nil && ctx.Err() == nil:
				s.err = err
			case err == nil:
				s.samples++
				if d > s.max {
					s.max, s.maxWhich = d, which
				}
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(queueSampleEvery):
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the largest depth and which queue was deepest then ("none"
// when every sample found every queue empty).
func (s *queueSampler) Stop() (float64, string, error) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 && s.err == nil {
		s.err = fmt.Errorf("no sample of winnet-controller's queue depth")
	}
	if s.maxWhich == "" {
		s.maxWhich = "none"
	}
	return s.max, s.maxWhich, s.err
}

// routeProbeCIDR and routeProbeIP are the Pod CIDR and address of the Node added to time route
// convergence at size si: outside every object Node's, churn and burst range.
func routeProbeCIDR(si int) netip.Prefix { return netip.PrefixFrom(addrAt(routeProbeBase, si*256), 24) }

var (
	routeProbeBase   = netip.MustParseAddr("100.126.0.0")
	routeProbeNodeIP = netip.MustParseAddr("172.21.0.10")
)

// routeConvergence adds a Node (as kubelet registers one: its Pod CIDR, then its addresses and
// Ready) and returns, for each agent, how long until its switch has the route's flow (an OpenFlow
// monitor per switch, registered before the Node is created); then it deletes the Node.
func routeConvergence(t *testing.T, ctx context.Context, w *writer, agents []*agent, si int) []time.Duration {
	t.Helper()
	name, cidr := fmt.Sprintf("route-probe-%d", si), routeProbeCIDR(si)
	seen := make([]<-chan time.Time, len(agents))
	for i, a := range agents {
		seen[i] = benchutil.MonitorFlow(t, ctx, &simnode.Node{Name: a.node.Name, OVS: a.node.OVS}, cluster.BridgeName,
			fmt.Sprintf("table=%d,ip,nw_dst=%s", pipeline.L3ForwardingTable, cidr))
	}
	start := time.Now()
	if err := retry(func() error { return w.nodeAt(ctx, name, cidr, addrAt(routeProbeNodeIP, si)) }); err != nil {
		t.Fatalf("route convergence: creating Node %s: %v", name, err)
	}
	out := make([]time.Duration, len(agents))
	for i, ch := range seen {
		at, ok := <-ch
		if !ok {
			t.Fatalf("route convergence: the route to new Node %s (%s) did not reach the switch of %s in 5 minutes", name, cidr, agents[i].node.Name)
		}
		out[i] = at.Sub(start)
	}
	if err := w.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("route convergence: deleting Node %s: %v", name, err)
	}
	return out
}

// slowest is the largest duration.
func slowest(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] > s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[0]
}
