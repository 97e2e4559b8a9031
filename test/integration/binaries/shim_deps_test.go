package binaries

import (
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestShimLinksNoAgentCode: kubelet starts winnet-cni for every CNI call, so the shim links only
// what forwarding a request needs. Running plugins (the CNI library's invoke package, which brings
// OpenTelemetry and net/http), Kubernetes clients and OVS libraries are the agent's.
func TestShimLinksNoAgentCode(t *testing.T) {
	forbidden := []string{
		"github.com/containernetworking/cni/pkg/invoke",
		"go.opentelemetry.io/",
		"net/http",
		"k8s.io/",
		"sigs.k8s.io/",
		"github.com/ovn-kubernetes/libovsdb",
		"antrea.io/",
		"github.com/winnet-io/winnet/internal/cni/ipam",
	}
	for _, goos := range []string{"linux", "windows"} {
		t.Run(goos, func(t *testing.T) {
			g := NewWithT(t)
			list := hostcmd.Command("go", "list", "-deps", "./cmd/winnet-cni")
			list.Dir = framework.RepoRoot()
			list.Env = append(os.Environ(), "GOOS="+goos)
			out, err := list.Output()
			g.Expect(err).NotTo(HaveOccurred(), "go list -deps ./cmd/winnet-cni")
			deps := strings.Fields(string(out))
			g.Expect(deps).To(ContainElement("github.com/containernetworking/cni/pkg/skel"), "the shim is built on the CNI library's skel")
			for _, dep := range deps {
				for _, f := range forbidden {
					g.Expect(within(dep, f)).To(BeFalse(), "winnet-cni (GOOS=%s) links %s", goos, dep)
				}
			}
		})
	}
}

// within reports whether package dep is prefix or below it; a prefix ending in "/" is a path prefix.
func within(dep, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(dep, prefix)
	}
	return dep == prefix || strings.HasPrefix(dep, prefix+"/")
}

// TestDaemonsExportBuildInfo: winnet-agent and winnet-controller link internal/buildinfo, which puts
// winnet_build_info on the registry their metrics endpoints serve (internal/agent's and
// internal/controller's TestMetricsNeedATokenAllowedToGetThem scrape it; they run in one test
// process with other packages, so only the binaries' dependencies show that each links it).
func TestDaemonsExportBuildInfo(t *testing.T) {
	for _, cmd := range []string{"winnet-agent", "winnet-controller"} {
		for _, goos := range []string{"linux", "windows"} {
			t.Run(cmd+" "+goos, func(t *testing.T) {
				g := NewWithT(t)
				list := hostcmd.Command("go", "list", "-deps", "./cmd/"+cmd)
				list.Dir = framework.RepoRoot()
				list.Env = append(os.Environ(), "GOOS="+goos)
				out, err := list.Output()
				g.Expect(err).NotTo(HaveOccurred(), "go list -deps ./cmd/%s", cmd)
				g.Expect(strings.Fields(string(out))).To(ContainElement("github.com/winnet-io/winnet/internal/buildinfo"))
			})
		}
	}
}
