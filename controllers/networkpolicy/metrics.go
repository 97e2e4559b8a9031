package networkpolicy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// realisationLatency is the time from the first change a pass reacted to (a NetworkPolicy, Pod
	// or Namespace event) to the pass's bundle committed in OVS, for passes that changed the switch.
	realisationLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "realisation_latency_seconds",
		Help:      "Time from a NetworkPolicy, Pod or Namespace change seen by the agent to its flows committed in OVS.",
		Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	// realised counts the policies and rules the last pass realised.
	realised = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "realised",
		Help:      "NetworkPolicies selecting local Pods and rules (conjunctions) the agent's last pass realised in OVS.",
	}, []string{"kind"})
	// passes counts the passes by kind: full (every input read: the policies of the local Pods'
	// namespaces, the Namespaces, the Pods those policies may select), pods (the changed Pods
	// alone, incremental.go) and check (nothing changed: the bridge's flows checked, nothing read).
	passes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "passes_total",
		Help:      "NetworkPolicy passes of the agent by kind: full (inputs read and compiled), pods (changed Pods applied alone), check (nothing changed, nothing read).",
	}, []string{"kind"})
	// peerWatches, peerObjects and peerEvents are the peer Pod watches (peers.go): how many are
	// open, the Pods they hold, and the events they delivered (lists included). A Pod that no
	// local policy names is in none, and its updates are no event here.
	peerWatches = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "peer_watches",
		Help:      "Pod watches the agent holds open for the peers of its node's NetworkPolicies.",
	})
	peerObjects = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "peer_pods",
		Help:      "Pods held by the agent's peer Pod watches (a Pod two watches select counts twice).",
	})
	peerEvents = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "peer_pod_events_total",
		Help:      "Pod events (adds of lists included, updates, deletes) the agent's peer Pod watches received.",
	})
	// peersRepaired counts the peer Pods the periodic check found applied otherwise than the
	// watches hold them (a change the incremental path lost) and applied again: 0 unless a change
	// was lost.
	peersRepaired = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet",
		Subsystem: "networkpolicy",
		Name:      "peer_pods_repaired_total",
		Help:      "Peer Pods the periodic check found in the wrong peer sets, or with other addresses than the peer watches hold (a lost change), and applied again.",
	})
)

// Pass kinds (the kind label of winnet_networkpolicy_passes_total).
const (
	PassFull  = "full"
	PassPods  = "pods"
	PassCheck = "check"
)

func init() {
	ctrlmetrics.Registry.MustRegister(realisationLatency, realised, passes, peerWatches, peerObjects, peerEvents, peersRepaired)
}

// observePass records a pass: its latency when it changed the switch, and what it realised.
func observePass(d Desired, changed bool, latency time.Duration) {
	if changed {
		realisationLatency.Observe(latency.Seconds())
	}
	realised.WithLabelValues("policies").Set(float64(d.Policies))
	realised.WithLabelValues("rules").Set(float64(d.Rules))
}
