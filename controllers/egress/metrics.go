package egress

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/internal/metricsources"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Per-Egress counters are read from the holder's switch when Prometheus scrapes the agent: the
// Egress's commit flow (ConntrackCommitTable, matching its id in EgressField) counts the first packet of
// each new connection a selected Pod opens to outside, and the bytes of those first packets. One
// flow-stats request per scrape, cookie pipeline.CategoryEgress. The counters are the flow's own: they
// start again from zero when the flows are made anew (the Egress comes back to the node, ovs-vswitchd
// restarts), as a Prometheus counter reset does.
//
// Bytes of whole connections are not counted: the packets after the first take the node's shared path
// of established SNATed connections (ConntrackStateTable), which no Egress flow sees; counting them needs
// a per-Egress flow there (docs/egress.md, "Limits").

var (
	egressConnectionsDesc = prometheus.NewDesc("winnet_egress_connections_total",
		"New connections the selected Pods of this node opened to outside the cluster through the Egress's IP (the first packet of each; a retransmitted first packet counts again). Only the holding node reports an Egress.",
		[]string{"egress"}, nil)
	egressFirstBytesDesc = prometheus.NewDesc("winnet_egress_first_packet_bytes_total",
		"Bytes of the first packets that winnet_egress_connections_total counts (not the connections' later packets).",
		[]string{"egress"}, nil)
)

// metricsReadTimeout bounds one read of the counters.
const metricsReadTimeout = 5 * time.Second

// egressCollector exposes the counters of every agent of the process (one in production; the tests
// run several, whose series of one Egress are added up: only its holder has any).
type egressCollector struct {
	sources metricsources.Set[*Reconciler]
}

var collector = &egressCollector{}

func init() {
	ctrlmetrics.Registry.MustRegister(collector)
}

// Describe sends the two descriptors.
func (c *egressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- egressConnectionsDesc
	ch <- egressFirstBytesDesc
}

// Collect reads every agent's counters.
func (c *egressCollector) Collect(ch chan<- prometheus.Metric) {
	conns, bytes := map[string]uint64{}, map[string]uint64{}
	for _, r := range c.sources.List() {
		got, err := r.Counters(context.Background())
		if err != nil {
			ctrl.Log.WithName("egress-metrics").Info("Cannot read the Egresses' counters from the switch", "node", r.NodeName, "error", err.Error())
			continue
		}
		for name, v := range got {
			conns[name] += v.Connections
			bytes[name] += v.Bytes
		}
	}
	for name := range conns {
		ch <- prometheus.MustNewConstMetric(egressConnectionsDesc, prometheus.CounterValue, float64(conns[name]), name)
		ch <- prometheus.MustNewConstMetric(egressFirstBytesDesc, prometheus.CounterValue, float64(bytes[name]), name)
	}
}

// Counters are one Egress's counters on its holder: new connections, and the bytes of their first packets.
type Counters struct{ Connections, Bytes uint64 }

// heldNames records, after a pass installed the flows, which Egress each id stands for.
type heldNames struct {
	mu    sync.Mutex
	names map[uint32]string
}

func (h *heldNames) set(ids map[string]uint32, installed []pipeline.Egress) {
	byID := map[uint32]string{}
	for name, id := range ids {
		byID[id] = name
	}
	names := map[uint32]string{}
	for _, e := range installed {
		if name, ok := byID[e.ID]; ok {
			names[e.ID] = name
		}
	}
	h.mu.Lock()
	h.names = names
	h.mu.Unlock()
}

// of names the Egress of a flow by the id it matches.
func (h *heldNames) of(s openflow.FlowStat) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, ok := s.Regs[pipeline.EgressField.Reg]
	if !ok {
		return "", false
	}
	n, ok := h.names[id]
	return n, ok
}

// Counters reads the counters of the Egresses the node holds, by Egress name.
func (r *Reconciler) Counters(ctx context.Context) (map[string]Counters, error) {
	out := map[string]Counters{}
	rz, ok := r.State.Realized()
	if !ok || rz.Flows == nil {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, metricsReadTimeout)
	defer cancel()
	cookie, mask := openflow.MakeCookie(0, pipeline.CategoryEgress, 0), openflow.CategoryMask
	for _, t := range []struct {
		table uint8
		add   func(*Counters, openflow.FlowStat)
	}{
		{pipeline.ConntrackCommitTable, func(c *Counters, s openflow.FlowStat) {
			c.Connections, c.Bytes = c.Connections+s.Packets, c.Bytes+s.Bytes
		}},
	} {
		stats, err := rz.Flows.FlowStats(ctx, t.table, cookie, mask)
		if err != nil {
			return nil, err
		}
		for _, s := range stats {
			name, ok := r.held.of(s)
			if !ok {
				continue
			}
			c := out[name]
			t.add(&c, s)
			out[name] = c
		}
	}
	return out, nil
}
