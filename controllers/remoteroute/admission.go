package remoteroute

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/metricsources"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Tunnel admission (pipeline.TunnelAdmissionTable) drops what does not come from a peer's tunnel
// endpoint with an inner source the peer owns. What it dropped is read in two ways:
//   - the packet counters of its drop flows, by reason, into tunnelDropped, when Prometheus scrapes
//     the agent (admissionCollector): one flow dump of the admission table, a few flows per peer.
//     Each full pass used to read them, so that a node of a 5,000-Node cluster decoded some 30,000
//     flows' counters every ResyncPeriod whether anyone looked or not (bench-scale, issue 64);
//   - the addresses from which a peer's inner sources arrived (learned by the pipeline into
//     TunnelSourceSeenTable, one flow per address for pipeline.TunnelSeenTimeout seconds), by each
//     full pass, each reported once with a Warning Event on the node's WindowsNodeNetwork for as
//     long as the pipeline remembers it: one dump of the learned flows alone per ResyncPeriod.

// PeerAddressMismatchReason is the reason of the Event saying that a peer's traffic arrives from an
// address its route does not name.
const PeerAddressMismatchReason = "TunnelPeerAddressMismatch"

// tunnelDropped counts the tunnel packets admission dropped, by reason.
var tunnelDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "winnet",
	Subsystem: "tunnel_admission",
	Name:      "dropped_packets_total",
	Help: "Tunnelled packets the node dropped because they came from no peer's tunnel endpoint (unknown-source), " +
		"carried an inner source their peer does not own (inner-source-not-owned), another VNI than their peer's (wrong-vni), " +
		"or a peer's inner source from another address (peer-from-other-address). Read from the switch when scraped.",
}, []string{"reason"})

// admissionCollector reads every agent's drop counters into tunnelDropped when scraped, then exposes
// it (one agent in production; the tests run several in one process, whose drops add up).
type admissionCollector struct {
	sources metricsources.Set[*Reconciler]
}

var admissionMetrics = &admissionCollector{}

func init() {
	ctrlmetrics.Registry.MustRegister(admissionMetrics)
	for _, reason := range pipeline.TunnelDropReasons {
		tunnelDropped.WithLabelValues(reason)
	}
}

// Describe sends tunnelDropped's descriptor.
func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) { tunnelDropped.Describe(ch) }

// Collect reads the drop counters of every agent, then sends tunnelDropped.
func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.sources.List() {
		ctx, cancel := context.WithTimeout(context.Background(), dropsReadTimeout)
		if err := r.readDrops(ctx); err != nil {
			ctrl.Log.WithName("tunnel-admission-metrics").Info("Cannot read the tunnel admission counters from the switch", "node", r.NodeName, "error", err.Error())
		}
		cancel()
	}
	tunnelDropped.Collect(ch)
}

// dropsReadTimeout bounds one read of the drop counters.
const dropsReadTimeout = 5 * time.Second

// peer is what a route's cookie object stands for, to name it in Events.
type peer struct {
	name   string
	nodeIP netip.Addr
}

// admissionReport is what the last reads of the admission counters saw.
type admissionReport struct {
	// mu guards dropped: scrapes may run at the same time.
	mu sync.Mutex
	// dropped are the drop flows' counters, summed by reason, at the last read.
	dropped map[string]uint64
	// reported are the (route, address) pairs already told in an Event, among those the pipeline
	// still remembers.
	reported map[seenKey]bool
}

type seenKey struct {
	route string
	addr  netip.Addr
}

// readDrops adds what tunnel admission dropped since the last read to tunnelDropped.
func (r *Reconciler) readDrops(ctx context.Context) error {
	if r.State == nil {
		return nil
	}
	rz, ok := r.State.Realized()
	if !ok || rz.Node.TunnelOFPort == 0 || rz.Flows == nil {
		return nil
	}
	stats, err := rz.Flows.FlowStats(ctx, pipeline.TunnelAdmissionTable, 0, 0)
	if err != nil {
		return err
	}
	sums := map[string]uint64{}
	for _, s := range stats {
		if reason, ok := pipeline.TunnelDropReasons[s.Priority]; ok {
			sums[reason] += s.Packets
		}
	}
	r.admission.mu.Lock()
	defer r.admission.mu.Unlock()
	if r.admission.dropped == nil {
		r.admission.dropped = map[string]uint64{}
	}
	for reason, n := range sums {
		last := r.admission.dropped[reason]
		if n < last {
			last = 0 // flows replaced: their counters started again
		}
		if n > last {
			tunnelDropped.WithLabelValues(reason).Add(float64(n - last))
		}
		r.admission.dropped[reason] = n
	}
	return nil
}

// readAdmission reports the addresses peers' traffic arrives from.
func (r *Reconciler) readAdmission(ctx context.Context, rz nodenetwork.Realized) {
	if rz.Node.TunnelOFPort == 0 || rz.Flows == nil {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	seen, err := rz.Flows.FlowStats(ctx, pipeline.TunnelSourceSeenTable,
		openflow.MakeCookie(0, pipeline.CategoryTunnelSeen, 0), openflow.CategoryMask)
	if err != nil {
		log.Error(err, "Reading the addresses peers' tunnel traffic arrives from")
		return
	}
	still := map[seenKey]bool{}
	var wnn *networkv1alpha1.WindowsNodeNetwork
	for _, s := range seen {
		p, ok := r.peers[s.Cookie&openflow.ObjectMask]
		if !ok || !s.TunSrc.IsValid() {
			continue
		}
		k := seenKey{p.name, s.TunSrc}
		still[k] = true
		if r.admission.reported[k] {
			continue
		}
		log.Info("Dropping a peer's tunnel traffic from an address its route does not name", "route", p.name, "nodeIP", p.nodeIP, "seen", s.TunSrc)
		if r.Recorder == nil {
			continue
		}
		if wnn == nil {
			wnn = &networkv1alpha1.WindowsNodeNetwork{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: r.NodeName}, wnn); err != nil {
				log.Error(err, "Getting the WindowsNodeNetwork to report a peer's address")
				return // reported at the next pass
			}
		}
		r.Recorder.Eventf(wnn, nil, corev1.EventTypeWarning, PeerAddressMismatchReason, "AdmitTunnel",
			"Dropping tunnel traffic of RemoteSubnetRoute %s (node IP %s): it arrives from %s. NAT between the nodes, a flannel public-ip "+
				"unlike the node's address, or a forged packet; spec.encapsulation.tunnelAdmission: Off admits it (docs/tunnel-admission.md)",
			p.name, p.nodeIP, s.TunSrc)
	}
	r.admission.reported = still
}

// rememberPeer records what a route's cookie object stands for.
func (r *Reconciler) rememberPeer(name string, nodeIP netip.Addr) {
	if r.peers == nil {
		r.peers = map[uint64]peer{}
	}
	r.peers[objectID(name)] = peer{name: name, nodeIP: nodeIP}
}
