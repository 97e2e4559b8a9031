package egress

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/metricsources"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Per-Egress counters are read from the holder's switch when Prometheus scrapes the agent: the
// Egress's commit flow (ConntrackCommitTable, matching its id in EgressField) counts the first packet of
// each new connection a selected Pod opens to outside, and its output flow (L2ForwardingOutTable, the
// same id) every packet the selected Pods send through the egress IP, first and later ones, local and
// relayed (pipeline.EgressHolderFlows). One flow-stats request per table and scrape, cookie
// pipeline.CategoryEgress. The counters are the flows' own: they start again from zero when the flows
// are made anew (the Egress comes back to the node, ovs-vswitchd restarts), as a Prometheus counter
// reset does.
//
// The replies' bytes are not counted: they are un-NATed in ConntrackTable, before any flow could tell
// one Egress's from another's without a flow per selected Pod (docs/egress.md, "Limits").

var (
	egressConnectionsDesc = prometheus.NewDesc("winnet_egress_connections_total",
		"New connections the selected Pods opened to outside the cluster through the Egress's IP (the first packet of each; a retransmitted first packet counts again). Only the holding node reports an Egress.",
		[]string{"egress"}, nil)
	egressSentBytesDesc = prometheus.NewDesc("winnet_egress_sent_bytes_total",
		"Bytes the selected Pods sent to outside the cluster through the Egress's IP: every packet of their connections, as it left the holder (not the replies). Only the holding node reports an Egress.",
		[]string{"egress"}, nil)
	egressSentPacketsDesc = prometheus.NewDesc("winnet_egress_sent_packets_total",
		"Packets that winnet_egress_sent_bytes_total counts.",
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

// Describe sends the descriptors.
func (c *egressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- egressConnectionsDesc
	ch <- egressSentBytesDesc
	ch <- egressSentPacketsDesc
}

// Collect reads every agent's counters.
func (c *egressCollector) Collect(ch chan<- prometheus.Metric) {
	sum := map[string]Counters{}
	for _, r := range c.sources.List() {
		got, err := r.Counters(context.Background())
		if err != nil {
			ctrl.Log.WithName("egress-metrics").Info("Cannot read the Egresses' counters from the switch", "node", r.NodeName, "error", err.Error())
			continue
		}
		for name, v := range got {
			s := sum[name]
			s.Connections, s.SentBytes, s.SentPackets = s.Connections+v.Connections, s.SentBytes+v.SentBytes, s.SentPackets+v.SentPackets
			sum[name] = s
		}
	}
	for name, s := range sum {
		ch <- prometheus.MustNewConstMetric(egressConnectionsDesc, prometheus.CounterValue, float64(s.Connections), name)
		ch <- prometheus.MustNewConstMetric(egressSentBytesDesc, prometheus.CounterValue, float64(s.SentBytes), name)
		ch <- prometheus.MustNewConstMetric(egressSentPacketsDesc, prometheus.CounterValue, float64(s.SentPackets), name)
	}
}

// Counters are one Egress's counters on its holder: new connections, and the packets and bytes the
// selected Pods sent through it.
type Counters struct{ Connections, SentBytes, SentPackets uint64 }

// heldEgresses are the installed Egresses with their names (the ids are r.ids'), which State keeps for
// packet traces and the counters.
func heldEgresses(ids map[string]uint32, installed []pipeline.Egress) []nodenetwork.HeldEgress {
	byID := make(map[uint32]string, len(ids))
	for name, id := range ids {
		byID[id] = name
	}
	out := make([]nodenetwork.HeldEgress, 0, len(installed))
	for _, e := range installed {
		if name, ok := byID[e.ID]; ok {
			out = append(out, nodenetwork.HeldEgress{ID: e.ID, Name: name, IP: e.IP})
		}
	}
	return out
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
	names := map[uint32]string{}
	for _, e := range r.State.HeldEgresses() {
		names[e.ID] = e.Name
	}
	for _, t := range []struct {
		table uint8
		add   func(*Counters, openflow.FlowStat)
	}{
		{pipeline.ConntrackCommitTable, func(c *Counters, s openflow.FlowStat) { c.Connections += s.Packets }},
		{pipeline.L2ForwardingOutTable, func(c *Counters, s openflow.FlowStat) {
			c.SentBytes, c.SentPackets = c.SentBytes+s.Bytes, c.SentPackets+s.Packets
		}},
	} {
		stats, err := rz.Flows.FlowStats(ctx, t.table, cookie, mask)
		if err != nil {
			return nil, err
		}
		for _, s := range stats {
			id, ok := s.Regs[pipeline.EgressField.Reg]
			name, held := names[id]
			if !ok || !held {
				continue
			}
			c := out[name]
			t.add(&c, s)
			out[name] = c
		}
	}
	return out, nil
}
