package buildinfo

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet"
)

func init() {
	b := winnet.Build()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "winnet_build_info",
		Help:        "Always 1; its labels are the running winnet release (version), the git revision it was built from and the Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	gauge.Set(1)
	ctrlmetrics.Registry.MustRegister(gauge)
}
