package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// programmingDuration is how long a pass that changed the switch took, from reading the Services
	// and EndpointSlices to the last group, flow and host route in place.
	programmingDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "winnet",
		Subsystem: "service",
		Name:      "programming_duration_seconds",
		Help:      "Time a Service pass that changed the switch took to put every group, flow and host route in place.",
		Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	// realised counts the Services, Service ports and endpoints the last pass realised.
	realised = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "winnet",
		Subsystem: "service",
		Name:      "realised",
		Help:      "Services, Service ports and endpoints the agent's last pass realised in OVS.",
	}, []string{"kind"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(programmingDuration, realised)
}

// observePass records a pass: its duration when it changed the switch, and what it realised.
func observePass(c counts, changed bool, took time.Duration) {
	if changed {
		programmingDuration.Observe(took.Seconds())
	}
	realised.WithLabelValues("services").Set(float64(c.services))
	realised.WithLabelValues("ports").Set(float64(c.ports))
	realised.WithLabelValues("endpoints").Set(float64(c.endpoints))
}
