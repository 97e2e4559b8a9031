package agent

import (
	"fmt"
	"path/filepath"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/hns"
)

// SimHostIPDelay is how long the HNS simulator takes to put the host IP on a new network's management vNIC,
// as Windows takes a moment (see hns.LinuxSimOptions.HostIPDelay).
const SimHostIPDelay = 300 * time.Millisecond

// SimSandboxDir is the directory, in the agent's state directory, where a runtime (a test harness playing
// containerd) marks the sandboxes it started, so that the HNS simulator makes their endpoints' vNICs appear
// (see hns.LinuxSimOptions.SandboxDir and hns.StartSandbox).
const SimSandboxDir = "hns-sandboxes"

// newHNS returns the HNS simulator backed by veth pairs: Linux has no HNS, and this is how the whole
// data plane runs on Linux (simulated nodes, the demo). Like HNS, whose state survives an agent
// restart but not a reboot, the simulator keeps its state in a file under the agent's state dir; a
// simulated reboot removes that file.
func newHNS(opts HostOptions) (hns.Interface, error) {
	h, err := hns.NewLinuxSim(hns.LinuxSimOptions{
		SimOptions:  hns.SimOptions{Latency: opts.HNSSimLatency},
		HostNetNS:   opts.NetNSPath,
		HostIPDelay: SimHostIPDelay,
		SandboxDir:  filepath.Join(opts.StateDir, SimSandboxDir),
		Containerd:  opts.HNSSimContainerd,
		StateFile:   filepath.Join(opts.StateDir, "hns-sim.json"),
		Log:         ctrl.Log.WithName("hns-simulator"),
	})
	if err != nil {
		return nil, fmt.Errorf("starting the HNS simulator: %w", err)
	}
	return h, nil
}
