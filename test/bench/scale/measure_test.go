//go:build linux && bench

package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// agentUser is the user the agents write as: winnet-agent's ServiceAccount (test/e2e/cluster);
// controllerUser winnet-controller's (cluster.Options.ControllerServiceAccount).
const (
	agentUser      = "system:serviceaccount:winnet-system:winnet-agent"
	controllerUser = "system:serviceaccount:winnet-system:winnet-controller"
)

// auditPolicy records only the agents' and winnet-controller's writes, at Metadata level.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + agentUser + `", "` + controllerUser + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditEvent is what the benchmark reads of an audit event.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string
		Extra    map[string][]string
	} `json:"user"`
	ObjectRef struct {
		Resource, Subresource, Name string
	} `json:"objectRef"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// agentWrites counts the completed writes of the agents of nodes (their tokens are bound to their
// Node, whose name the audit event carries) in the audit log between from and to, and says what
// they were (resource/subresource verb: count).
func agentWrites(path string, nodes map[string]bool, from, to time.Time) (int, string, error) {
	return auditWrites(path, from, to, func(e auditEvent) bool {
		node := e.User.Extra["authentication.kubernetes.io/node-name"]
		return e.User.Username == agentUser && len(node) == 1 && nodes[node[0]]
	})
}

// controllerWrites counts winnet-controller's completed writes in the audit log between from and
// to, and says what they were. The TokenReviews and SubjectAccessReviews it creates to authorise
// the benchmark's scrapes of its metrics are not counted: they store nothing, and the benchmark
// causes them.
func controllerWrites(path string, from, to time.Time) (int, string, error) {
	return auditWrites(path, from, to, func(e auditEvent) bool {
		return e.User.Username == controllerUser && e.ObjectRef.Resource != "tokenreviews" && e.ObjectRef.Resource != "subjectaccessreviews"
	})
}

// auditWrites counts the completed writes of the audit log between from and to that keep accepts,
// and says what they were (resource/subresource verb: count).
func auditWrites(path string, from, to time.Time, keep func(auditEvent) bool) (int, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	what := map[string]int{}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return 0, "", fmt.Errorf("reading the audit log: %w", err)
		}
		if e.Stage != "ResponseComplete" || e.StageTimestamp.Before(from) || !e.StageTimestamp.Before(to) || !keep(e) {
			continue
		}
		n++
		what[e.ObjectRef.Resource+"/"+e.ObjectRef.Subresource+" "+e.Verb]++
	}
	keys := make([]string, 0, len(what))
	for k := range what {
		keys = append(keys, fmt.Sprintf("%s: %d", k, what[k]))
	}
	sort.Strings(keys)
	if err := sc.Err(); err != nil {
		return 0, "", fmt.Errorf("reading the audit log: %w", err)
	}
	return n, strings.Join(keys, ", "), nil
}

// cpuTime is a process's user+system CPU time (USER_HZ is 100 on Linux).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// rssMB is a process's VmRSS in MiB.
func rssMB(pid int) (float64, error) {
	m, err := cluster.ReadProcMemory(pid)
	return m.RSS, err
}

var heapAllocRE = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)`)

// heapMB is a process's live heap after a GC: HeapAlloc of its heap profile fetched with gc=1 (the
// profiler runs a GC first) from its loopback-only pprof endpoint (the agent's, winnet-controller's).
func heapMB(addr string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return 0, fmt.Errorf("reading the heap profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := heapAllocRE.FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("no HeapAlloc in the heap profile at %s (%s)", addr, resp.Status)
	}
	n, _ := strconv.ParseFloat(string(m[1]), 64)
	return n / (1 << 20), nil
}

// saveHeapProfile writes the heap profile of the process at addr's pprof endpoint, after a GC, to
// file (BENCH_SCALE_PROFILE_DIR: read it with go tool pprof -sample_index=inuse_space).
func saveHeapProfile(addr, file string) error {
	return saveProfile(addr, "heap?gc=1", file)
}

// saveProfile writes what the process at addr's pprof endpoint answers for /debug/pprof/<query> to
// file: a heap profile, an allocation profile over some seconds (allocs?seconds=..), or the heap
// profile's text with the runtime's MemStats (heap?debug=1).
func saveProfile(addr, query, file string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + query)
	if err != nil {
		return fmt.Errorf("reading the profile %s: %w", query, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the profile %s at %s: %s", query, addr, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// counter counts the bytes of response bodies.
type counter struct {
	rt    http.RoundTripper
	bytes *atomic.Int64
}

func (c counter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil {
		resp.Body = countingBody{resp.Body, c.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	bytes *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.bytes.Add(int64(n))
	return n, err
}

// watchModel is a set of watches, as one node's agent or kube-proxy opens them, counting the bytes
// the API server sends from the moment they start.
type watchModel struct {
	bytes, events atomic.Int64
	stop          []func()
}

// watchSpec is one watch: a built-in resource (protobuf) or a custom one (JSON), with selectors.
type watchSpec struct {
	gvr          schema.GroupVersionResource
	custom       bool
	label, field string
	// namespace limits a built-in watch to one namespace ("" every one).
	namespace string
}

var (
	podsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodesGVR     = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	nsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	servicesGVR  = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	slicesGVR    = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	policiesGVR  = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	routesGVR    = networkv1alpha1.GroupVersion.WithResource("remotesubnetroutes")
	endpointsGVR = networkv1alpha1.GroupVersion.WithResource("podendpoints")
)

// refAgentWatches are main's agent's (before issue 38) cluster-wide watches: every Pod (NetworkPolicy's
// peers), NetworkPolicy, Namespace and RemoteSubnetRoute, the Services and EndpointSlices
// kube-proxy would serve, and its own Node and PodEndpoints.
func refAgentWatches(node string) []watchSpec {
	return []watchSpec{
		{gvr: podsGVR}, {gvr: policiesGVR}, {gvr: nsGVR}, {gvr: routesGVR, custom: true},
		{gvr: servicesGVR, label: proxiedBy}, {gvr: slicesGVR, label: proxiedBy},
		{gvr: nodesGVR, field: "metadata.name=" + node}, {gvr: endpointsGVR, custom: true, field: "spec.nodeName=" + node},
	}
}

// agentWatches are the agent's watches (internal/agent, networkpolicy.PeerWatches): its node's
// Pods, the peer Pod watches of its local policies, every NetworkPolicy, Namespace and
// RemoteSubnetRoute, the Services and EndpointSlices kube-proxy would serve, and its own Node and
// PodEndpoints.
func agentWatches(node string, peers []networkpolicy.PodWatch) []watchSpec {
	out := []watchSpec{
		{gvr: podsGVR, field: "spec.nodeName=" + node}, {gvr: policiesGVR}, {gvr: nsGVR}, {gvr: routesGVR, custom: true},
		{gvr: servicesGVR, label: proxiedBy}, {gvr: slicesGVR, label: proxiedBy},
		{gvr: nodesGVR, field: "metadata.name=" + node}, {gvr: endpointsGVR, custom: true, field: "spec.nodeName=" + node},
	}
	for _, p := range peers {
		out = append(out, watchSpec{gvr: podsGVR, namespace: p.Namespace, label: p.LabelSelector})
	}
	return out
}

// kubeProxyWatches are kube-proxy's (cmd/kube-proxy/app/server.go): the Services and EndpointSlices
// it serves and its Node.
func kubeProxyWatches(node string) []watchSpec {
	return []watchSpec{{gvr: servicesGVR, label: proxiedBy}, {gvr: slicesGVR, label: proxiedBy}, {gvr: nodesGVR, field: "metadata.name=" + node}}
}

// startWatches opens the watches from the current resource version of each (a list of one item
// gives it), so that only changes from now on are counted.
func startWatches(ctx context.Context, cfg *rest.Config, specs []watchSpec) (*watchModel, error) {
	m := &watchModel{}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counter{rt: rt, bytes: &m.bytes} })
	proto := rest.CopyConfig(cfg)
	proto.ContentType, proto.AcceptContentTypes = protobuf, protobuf+",application/json"
	cs, err := kubernetes.NewForConfig(proto)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var listed int64
	for _, s := range specs {
		opts := metav1.ListOptions{LabelSelector: s.label, FieldSelector: s.field, Limit: 1}
		if s.field != "" {
			if _, err := fields.ParseSelector(s.field); err != nil {
				return nil, err
			}
		}
		var w watch.Interface
		if s.custom {
			l, err := dyn.Resource(s.gvr).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", s.gvr, err)
			}
			opts.ResourceVersion, opts.Limit = l.GetResourceVersion(), 0
			w, err = dyn.Resource(s.gvr).Watch(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("watching %s: %w", s.gvr, err)
			}
		} else {
			rv, err := listRV(ctx, cs, s.gvr, s.namespace, opts)
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", s.gvr, err)
			}
			opts.ResourceVersion, opts.Limit = rv, 0
			w, err = watchBuiltin(ctx, cs, s.gvr, s.namespace, opts)
			if err != nil {
				return nil, fmt.Errorf("watching %s: %w", s.gvr, err)
			}
		}
		go func() {
			for range w.ResultChan() {
				m.events.Add(1)
			}
		}()
		m.stop = append(m.stop, w.Stop)
	}
	// The lists' bytes are not the watches'.
	listed = m.bytes.Load()
	m.bytes.Add(-listed)
	return m, nil
}

// watchBuiltin watches a built-in resource with the clientset (protobuf).
func watchBuiltin(ctx context.Context, cs *kubernetes.Clientset, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	switch gvr {
	case podsGVR:
		return cs.CoreV1().Pods(ns).Watch(ctx, opts)
	case nodesGVR:
		return cs.CoreV1().Nodes().Watch(ctx, opts)
	case nsGVR:
		return cs.CoreV1().Namespaces().Watch(ctx, opts)
	case servicesGVR:
		return cs.CoreV1().Services("").Watch(ctx, opts)
	case slicesGVR:
		return cs.DiscoveryV1().EndpointSlices("").Watch(ctx, opts)
	case policiesGVR:
		return cs.NetworkingV1().NetworkPolicies("").Watch(ctx, opts)
	}
	return nil, fmt.Errorf("no watch for %s", gvr)
}

// listRV lists one item of a built-in resource with protobuf and returns the list's resource version.
func listRV(ctx context.Context, cs *kubernetes.Clientset, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (string, error) {
	var meta metav1.ListMeta
	switch gvr {
	case podsGVR:
		l, err := cs.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil {
			return "", err
		}
		meta = l.ListMeta
	case nodesGVR:
		l, err := cs.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return "", err
		}
		meta = l.ListMeta
	case nsGVR:
		l, err := cs.CoreV1().Namespaces().List(ctx, opts)
		if err != nil {
			return "", err
		}
		meta = l.ListMeta
	case servicesGVR:
		l, err := cs.CoreV1().Services("").List(ctx, opts)
		if err != nil {
			return "", err
		}
		meta = l.ListMeta
	case slicesGVR:
		l, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, opts)
		if err != nil {
			return "", err
		}
		meta = l.ListMeta
	case policiesGVR:
		l, err := cs.NetworkingV1().NetworkPolicies("").List(ctx, opts)
		if err != nil {
			return "", err
		}
		meta = l.ListMeta
	default:
		return "", fmt.Errorf("no list for %s", gvr)
	}
	return meta.ResourceVersion, nil
}

// Stop closes the watches and returns the bytes they received.
func (m *watchModel) Stop() int64 {
	for _, s := range m.stop {
		s()
	}
	return m.bytes.Load()
}

// fullPasses returns the durations (read + compute + sync) of the agent's full NetworkPolicy
// passes logged at or after from (the "Synced NetworkPolicy flows" lines that have a read step).
func fullPasses(logPath string, from time.Time) ([]time.Duration, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"Synced NetworkPolicy flows"`) {
			continue
		}
		var e map[string]any
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		ts, ok := e["ts"].(string)
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(from) {
			continue
		}
		if _, ok := e["read"]; !ok {
			continue
		}
		out = append(out, logDuration(e["read"])+logDuration(e["compute"])+logDuration(e["sync"]))
	}
	return out, sc.Err()
}

// logDuration reads a duration zap logged: seconds as a number, or Go's format as a string.
func logDuration(v any) time.Duration {
	switch d := v.(type) {
	case float64:
		return time.Duration(d * float64(time.Second))
	case string:
		x, _ := time.ParseDuration(d)
		return x
	}
	return 0
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
