package networkpolicy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/metricsources"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Per-rule counters (pipeline/counters.go) are read from the switch when Prometheus scrapes the
// agent: one flow-stats request per metric table for the counter flows (cookie mask
// pipeline.PolicyCounterCookie), one per default-drop table for the policy flows (the drops, each
// naming its Pod by its match) and one per ClusterNetworkPolicy table for its rules' flows
// (pipeline.ClusterRuleCookie) when the node has such rules, all sent at once, cached for CounterCacheTTL so that a scrape storm costs
// the switch at most one read per period. The flows' counters are added to running totals per
// series, so that flows replaced (a restart of ovs-vswitchd replays them from zero, a rule's
// priority moves) do not make a series go back; a series goes when its rule (or, for default
// drops, the namespace's last isolated Pod) leaves the node.

// CounterCacheTTL is how long a read of the rule counters answers scrapes.
const CounterCacheTTL = 5 * time.Second

// counterReadTimeout bounds one read of the counters (the requests to the switch).
const counterReadTimeout = 5 * time.Second

// Labels of the rule counters.
var counterLabels = []string{"policy_kind", "namespace", "name", "rule", "direction", "action"}

var (
	rulePacketsDesc = prometheus.NewDesc("winnet_policy_rule_packets_total",
		"Packets of the connections a policy rule admitted (both directions, as they pass the node's policy stage), or packets it dropped or passed "+
			"(Deny, Pass, and an isolated Pod's default drop: rule default-deny, action Drop).", counterLabels, nil)
	ruleBytesDesc = prometheus.NewDesc("winnet_policy_rule_bytes_total",
		"Bytes of the packets winnet_policy_rule_packets_total counts.", counterLabels, nil)
	ruleConnectionsDesc = prometheus.NewDesc("winnet_policy_rule_connections_total",
		"New connections a policy rule admitted; for Deny, Pass and default-deny, the new-connection packets it dropped or passed (a retransmitted SYN counts again).",
		counterLabels, nil)
)

// Default drops' labels: no policy name, this rule and action.
const (
	DefaultDenyRule = "default-deny"
	ActionDrop      = "Drop"
)

// counterKey is one series.
type counterKey struct {
	kind                       nodenetwork.PolicyKind
	namespace, name, rule, dir string
	action                     string
}

func (k counterKey) values() []string {
	return []string{string(k.kind), k.namespace, k.name, k.rule, k.dir, k.action}
}

// counterValues are one series' totals.
type counterValues struct{ packets, bytes, connections uint64 }

// flowKey identifies what was summed from the switch for one series at one read: a counter flow,
// or every flow of a ClusterNetworkPolicy rule (by table, priority and cookie object).
type flowKey struct {
	table    uint8
	priority uint16
	object   uint64
}

// ruleCounters reads a node's counters and keeps its running totals.
type ruleCounters struct {
	state *nodenetwork.State
	mu    sync.Mutex
	// last is each flow's counters at the previous read, totals each series' running totals.
	last   map[flowKey]counterValues
	totals map[counterKey]counterValues
	// readAt is when the switch was last read (now: the clock).
	readAt time.Time
	now    func() time.Time
}

func newRuleCounters(state *nodenetwork.State) *ruleCounters {
	return &ruleCounters{state: state, last: map[flowKey]counterValues{}, totals: map[counterKey]counterValues{}, now: time.Now}
}

// read returns the totals, reading the switch again when the last read is older than
// CounterCacheTTL. A failed read keeps the last totals.
func (c *ruleCounters) read(ctx context.Context) map[counterKey]counterValues {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && c.now().Sub(c.readAt) < CounterCacheTTL {
		return c.totals
	}
	c.readAt = c.now()
	rz, ok := c.state.Realized()
	if !ok || rz.Flows == nil {
		return c.totals
	}
	ctx, cancel := context.WithTimeout(ctx, counterReadTimeout)
	defer cancel()
	flows, err := readCounterFlows(ctx, rz.Flows, c.state.PolicyIndex())
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Reading the policy rule counters")
		return c.totals
	}
	c.apply(flows)
	return c.totals
}

// counted is what one read found of a flow: its series and counters.
type counted struct {
	series counterKey
	values counterValues
}

// apply adds what each flow counted since the previous read to its series, and drops the series
// no flow stands for any more.
func (c *ruleCounters) apply(flows map[flowKey]counted) {
	totals := make(map[counterKey]counterValues, len(c.totals))
	last := make(map[flowKey]counterValues, len(flows))
	for k, f := range flows {
		t := totals[f.series]
		if _, ok := totals[f.series]; !ok {
			t = c.totals[f.series]
		}
		prev := c.last[k]
		// A flow whose counters went back was replaced: it counted from zero since.
		t.packets += since(f.values.packets, prev.packets)
		t.bytes += since(f.values.bytes, prev.bytes)
		t.connections += since(f.values.connections, prev.connections)
		totals[f.series] = t
		last[k] = f.values
	}
	c.totals, c.last = totals, last
}

func since(now, before uint64) uint64 {
	if now < before {
		return now
	}
	return now - before
}

// counterFlowStats is what readCounterFlows needs of the bridge.
type counterFlowStats interface {
	FlowStats(ctx context.Context, table uint8, cookie, cookieMask uint64) ([]openflow.FlowStat, error)
}

// statsRequest is one flow-stats request of a read: a table and a cookie with its mask.
type statsRequest struct {
	table        uint8
	cookie, mask uint64
}

// flowStatsAll sends every request at once (the bridge tells the replies apart by xid, and
// ovs-vswitchd answers each as soon as it has read it) and returns their flows in the requests'
// order, or the requests' errors.
func flowStatsAll(ctx context.Context, b counterFlowStats, reqs []statsRequest) ([][]openflow.FlowStat, error) {
	out := make([][]openflow.FlowStat, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = b.FlowStats(ctx, r.table, r.cookie, r.mask)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reading the counter flows: %w", err)
	}
	return out, nil
}

// readCounterFlows reads the counter flows, the isolated Pods' default drops and the
// ClusterNetworkPolicy Deny and Pass rules' flows, each named by the index of the last full pass.
// Flows the index does not name (a rule realised by a pass whose index is not recorded yet) are
// left for the next read. The requests (one per table) are sent together.
func readCounterFlows(ctx context.Context, b counterFlowStats, idx nodenetwork.PolicyIndex) (map[flowKey]counted, error) {
	counterCookie, counterMask := pipeline.PolicyCounterCookie()
	metricTables := []uint8{pipeline.EgressMetricTable, pipeline.IngressMetricTable}
	dirs := []pipeline.PolicyDirection{pipeline.PolicyEgress, pipeline.PolicyIngress}
	reqs := make([]statsRequest, 0, 8)
	for _, table := range metricTables {
		reqs = append(reqs, statsRequest{table: table, cookie: counterCookie, mask: counterMask})
	}
	for _, dir := range dirs {
		reqs = append(reqs, statsRequest{table: pipeline.DefaultDropTable(dir), cookie: openflow.MakeCookie(0, pipeline.CategoryPolicy, 0), mask: openflow.CategoryMask})
	}
	clusterTables := 0
	if len(idx.ClusterRules) > 0 {
		cookie, mask := pipeline.ClusterRuleCookie()
		for _, tier := range []pipeline.ClusterTier{pipeline.AdminTier, pipeline.BaselineTier} {
			for _, dir := range dirs {
				reqs = append(reqs, statsRequest{table: pipeline.ClusterTable(tier, dir), cookie: cookie, mask: mask})
				clusterTables++
			}
		}
	}
	replies, err := flowStatsAll(ctx, b, reqs)
	if err != nil {
		return nil, err
	}
	out := map[flowKey]counted{}
	for _, stats := range replies[:len(metricTables)] {
		for _, s := range stats {
			kind, _, id, ok := pipeline.ParsePolicyCounterObject(s.Cookie)
			if !ok {
				continue
			}
			name, ok := idx.RuleOfConjID(id)
			if !ok {
				continue
			}
			v := counterValues{packets: s.Packets, bytes: s.Bytes}
			if kind == pipeline.CounterNew {
				v.connections = s.Packets
			}
			out[flowKey{table: s.Table, priority: s.Priority, object: s.Cookie & openflow.ObjectMask}] = counted{series: ruleSeries(name), values: v}
		}
	}
	// The default drops: the policy flows of the default tables at their priority, one per
	// isolated Pod, named by the Pod's namespace.
	for i, dir := range dirs {
		isolation := idx.IngressIsolation
		if dir == pipeline.PolicyEgress {
			isolation = idx.EgressIsolation
		}
		for _, s := range replies[len(metricTables)+i] {
			port, ok := pipeline.DefaultDropPort(dir, s.InPort, s.Regs)
			if s.Priority != pipeline.DefaultDropPriority || !ok || len(isolation[port]) == 0 {
				continue
			}
			series := counterKey{kind: nodenetwork.KindNetworkPolicy, namespace: isolation[port][0].Namespace, rule: DefaultDenyRule,
				dir: dirName(dir), action: ActionDrop}
			out[flowKey{table: s.Table, priority: s.Priority, object: uint64(port)}] = counted{series: series,
				values: counterValues{packets: s.Packets, bytes: s.Bytes, connections: s.Packets}}
		}
	}
	// Only a rule's deciding flows count packets (clause flows of a conjunction never do): the
	// sum over its flows is what it dropped or passed.
	for _, stats := range replies[len(reqs)-clusterTables:] {
		for _, s := range stats {
			name, ok := idx.RuleOfCookie(s.Cookie)
			if !ok || (name.Action != nodenetwork.ActionDeny && name.Action != nodenetwork.ActionPass) {
				continue // Accept rules count in the metric tables
			}
			k := flowKey{table: s.Table, priority: s.Priority, object: s.Cookie & openflow.ObjectMask}
			f := out[k]
			f.series = ruleSeries(name)
			f.values.packets += s.Packets
			f.values.bytes += s.Bytes
			f.values.connections += s.Packets
			out[k] = f
		}
	}
	return out, nil
}

// ruleSeries is the series of a named rule.
func ruleSeries(n nodenetwork.PolicyRuleName) counterKey {
	return counterKey{kind: n.Kind, namespace: n.Policy.Namespace, name: n.Policy.Name, rule: n.Rule(), dir: n.Direction(), action: n.Action}
}

// counterCollector exposes the rule counters of every agent of the process (one in production;
// the tests run several, whose series with the same labels are added up).
type counterCollector struct {
	sources metricsources.Set[*ruleCounters]
}

var ruleCounterCollector = &counterCollector{}

func init() {
	ctrlmetrics.Registry.MustRegister(ruleCounterCollector)
}

// Describe sends the descriptors of the three counters.
func (c *counterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rulePacketsDesc
	ch <- ruleBytesDesc
	ch <- ruleConnectionsDesc
}

// Collect reads (or takes from the cache) every agent's counters.
func (c *counterCollector) Collect(ch chan<- prometheus.Metric) {
	sources := c.sources.List()
	sum := map[counterKey]counterValues{}
	for _, s := range sources {
		for k, v := range s.read(context.Background()) {
			t := sum[k]
			t.packets += v.packets
			t.bytes += v.bytes
			t.connections += v.connections
			sum[k] = t
		}
	}
	for k, v := range sum {
		labels := k.values()
		ch <- prometheus.MustNewConstMetric(rulePacketsDesc, prometheus.CounterValue, float64(v.packets), labels...)
		ch <- prometheus.MustNewConstMetric(ruleBytesDesc, prometheus.CounterValue, float64(v.bytes), labels...)
		ch <- prometheus.MustNewConstMetric(ruleConnectionsDesc, prometheus.CounterValue, float64(v.connections), labels...)
	}
}
