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
)

// Pass kinds (the kind label of winnet_networkpolicy_passes_total).
const (
	PassFull  = "full"
	PassPods  = "pods"
	PassCheck = "check"
)

func init() {
	ctrlmetrics.Registry.MustRegister(realisationLatency, realised, passes)
}

// observePass records a pass: its latency when it changed the switch, and what it realised.
func observePass(d Desired, changed bool, latency time.Duration) {
	if changed {
		realisationLatency.Observe(latency.Seconds())
	}
	realised.WithLabelValues("policies").Set(float64(d.Policies))
	realised.WithLabelValues("rules").Set(float64(d.Rules))
}
