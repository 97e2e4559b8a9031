package buildinfo_test

import (
	"testing"

	. "github.com/onsi/gomega"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet"
	_ "github.com/winnet-io/winnet/internal/buildinfo"
)

// TestBuildInfoGauge: controller-runtime's registry holds winnet_build_info at 1, labelled with the
// binary's build.
func TestBuildInfoGauge(t *testing.T) {
	g := NewWithT(t)
	families, err := ctrlmetrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	b := winnet.Build()
	found := 0
	for _, f := range families {
		if f.GetName() != "winnet_build_info" {
			continue
		}
		found++
		g.Expect(f.GetType().String()).To(Equal("GAUGE"))
		g.Expect(f.GetMetric()).To(HaveLen(1))
		m := f.GetMetric()[0]
		g.Expect(m.GetGauge().GetValue()).To(BeEquivalentTo(1))
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		g.Expect(labels).To(Equal(map[string]string{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion}))
	}
	g.Expect(found).To(Equal(1), "winnet_build_info is registered once")
}
