package buildinfo

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet"
)

// MetricName is the name of the build's gauge: always 1, its labels say what runs.
const MetricName = "winnet_build_info"

func init() {
	b := winnet.Build()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricName,
		Help:        "Always 1; its labels are the running winnet release (version), the git revision it was built from and the Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	gauge.Set(1)
	ctrlmetrics.Registry.MustRegister(gauge)
}
