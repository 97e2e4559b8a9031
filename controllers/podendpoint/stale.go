package podendpoint

import (
	"context"
	"maps"
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

// The packets the pipeline drops because their connection belongs to an earlier Pod of a local
// Pod's address (pipeline/incarnation.go) are counted by the drop flows' counters, read when
// Prometheus scrapes the agent (at most once per staleCacheTTL) and added to running totals, so
// that flows replaced (a restart of ovs-vswitchd replays them from zero) do not make the series go
// back.

// staleCacheTTL is how long a read of the drop counters answers scrapes.
const staleCacheTTL = 5 * time.Second

var staleDroppedDesc = prometheus.NewDesc("winnet_stale_connection_dropped_packets_total",
	"Packets the node dropped because their connection was made by or to an earlier Pod of a local Pod's address "+
		"(the conntrack entries of a deleted Pod outlive it; docs/security.md), by direction as seen from the local Pod.",
	[]string{"direction"}, nil)

// staleCounter reads one agent's drop counters.
type staleCounter struct {
	state *nodenetwork.State
	mu    sync.Mutex
	// last is each drop flow's packet counter at the previous read; totals the running totals by
	// direction.
	last   map[pipeline.IncarnationDrop]uint64
	totals map[string]uint64
	readAt time.Time
}

func newStaleCounter(state *nodenetwork.State) *staleCounter {
	return &staleCounter{state: state, last: map[pipeline.IncarnationDrop]uint64{}, totals: map[string]uint64{"egress": 0, "ingress": 0}}
}

func directionLabel(d pipeline.PolicyDirection) string {
	if d == pipeline.PolicyEgress {
		return "egress"
	}
	return "ingress"
}

// read returns the totals, reading the switch when the last read is older than staleCacheTTL.
func (c *staleCounter) read(ctx context.Context) map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readAt.IsZero() || time.Since(c.readAt) >= staleCacheTTL {
		c.readAt = time.Now()
		c.readSwitch(ctx)
	}
	return maps.Clone(c.totals)
}

// readSwitch adds what each drop flow counted since the last read to its direction's total. A
// failed read is logged and adds nothing. Call with mu held.
func (c *staleCounter) readSwitch(ctx context.Context) {
	rz, ok := c.state.Realized()
	if !ok || rz.Flows == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, d := range pipeline.IncarnationDrops {
		stats, err := rz.Flows.FlowStats(ctx, d.Table, openflow.MakeCookie(0, d.Category, 0), openflow.CategoryMask)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Reading the counters of stale connections' drops")
			return
		}
		for _, s := range stats {
			if s.Priority != d.Priority {
				continue
			}
			prev := c.last[d]
			if s.Packets < prev {
				prev = 0 // the flow was replaced: it counted from zero since
			}
			c.totals[directionLabel(d.Direction)] += s.Packets - prev
			c.last[d] = s.Packets
		}
	}
}

// staleCollector exposes the counters of every agent of the process (one in production; the tests
// run several, whose series are added up).
type staleCollector struct {
	sources metricsources.Set[*staleCounter]
}

var staleConnections = &staleCollector{}

func init() {
	ctrlmetrics.Registry.MustRegister(staleConnections)
}

// Describe sends the counter's descriptor.
func (c *staleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- staleDroppedDesc }

// Collect reads (or takes from the cache) every agent's counters.
func (c *staleCollector) Collect(ch chan<- prometheus.Metric) {
	sources := c.sources.List()
	sum := map[string]uint64{"egress": 0, "ingress": 0}
	for _, s := range sources {
		for k, v := range s.read(context.Background()) {
			sum[k] += v
		}
	}
	for dir, v := range sum {
		ch <- prometheus.MustNewConstMetric(staleDroppedDesc, prometheus.CounterValue, float64(v), dir)
	}
}
