//go:build windows

package preflight

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/windows"
)

// TestReadOSInfo reads the build from the registry and holds it against the version API
// (RtlGetVersion), which cannot be told apart from the running kernel.
func TestReadOSInfo(t *testing.T) {
	g := NewWithT(t)
	info, err := ReadOSInfo()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("registry: %+v", info)
	g.Expect(info.Build).To(BeNumerically("==", windows.RtlGetVersion().BuildNumber))
	g.Expect(info.ProductName).NotTo(BeEmpty())
	f := gatherOS(context.Background())
	g.Expect(f.Value).To(Equal(info))
}

// TestQueryService asks the service control manager for a service every Windows (and Wine) runs
// and for one nobody installed: present and running, then absent without an error.
func TestQueryService(t *testing.T) {
	g := NewWithT(t)
	// RpcSs may still be starting in a Wine prefix that just woke up.
	g.Eventually(func() (ServiceState, error) { return QueryService("RpcSs") }).WithTimeout(20 * time.Second).
		Should(Equal(ServiceState{Present: true, Running: true, State: "running"}))
	s, err := QueryService("winnet-no-such-service")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(ServiceState{}))
	f := gatherServices(context.Background(), Options{})
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value).To(HaveKey(OVSDBService))
}

// TestTestSigning reads the boot options from the registry; a host whose value is absent has test
// signing off.
func TestTestSigning(t *testing.T) {
	g := NewWithT(t)
	on, err := TestSigning()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("test signing: %v", on)
	f := gatherDriver(context.Background())
	g.Expect(f.Err).NotTo(HaveOccurred())
	g.Expect(f.Value.TestSigning).To(Equal(on))
}

// TestOptionalFeatures asks WMI for the two features: it answers for both (enabled or not).
func TestOptionalFeatures(t *testing.T) {
	g := NewWithT(t)
	f := gatherFeatures(context.Background())
	g.Expect(f.Err).NotTo(HaveOccurred())
	t.Logf("features: %v", f.Value)
	g.Expect(f.Value).To(HaveKey(ContainersFeature))
	g.Expect(f.Value).To(HaveKey(HyperVFeature))
}
