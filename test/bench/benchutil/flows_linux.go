//go:build linux && bench

package benchutil

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/test/simnode"
)

// DumpCategoryFlows writes the bridge's flows whose cookie is of category (a pipeline.Category*:
// the switch filters them by cookie mask) to file in add-flows syntax, and returns their number.
// The file is what OfctlReference installs.
func DumpCategoryFlows(t *testing.T, node *simnode.Node, bridge string, category uint8, file string) int {
	t.Helper()
	spec := fmt.Sprintf("cookie=%#x/%#x", openflow.MakeCookie(0, category, 0), openflow.MakeCookie(0, 0xff, 0))
	lines, err := node.OVS.DumpFlows(bridge, "-O", "OpenFlow15", "--no-names", spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return len(lines)
}

// OfctlReference installs the flows of file (DumpCategoryFlows') with `ovs-ofctl --bundle
// add-flows` on a fresh bridge br-ref of the node's switch and returns how long that took: the
// reference the benchmarks measure winnet's installation against, in the same run.
func OfctlReference(t *testing.T, node *simnode.Node, file string) time.Duration {
	t.Helper()
	node.OVS.MustVsctl(t, "--may-exist", "add-br", "br-ref", "--", "set", "bridge", "br-ref", "datapath_type=netdev", "protocols=OpenFlow15")
	node.OVS.MustOfctl(t, "-O", "OpenFlow15", "del-flows", "br-ref")
	start := time.Now()
	node.OVS.MustOfctl(t, "-O", "OpenFlow15", "--bundle", "add-flows", "br-ref", file)
	return time.Since(start)
}
