package agent

import (
	"fmt"

	"github.com/winnet-io/winnet/internal/hns"
)

// newHNS returns the HNS simulator backed by veth pairs: Linux has no HNS, and this is how the whole
// data plane runs on Linux (simulated nodes, the demo). The simulator keeps its state in memory,
// as HNS loses its state at a reboot: an agent restart is handled like one.
func newHNS(opts HostOptions) (hns.Interface, error) {
	h, err := hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: opts.NetNSPath})
	if err != nil {
		return nil, fmt.Errorf("starting the HNS simulator: %w", err)
	}
	return h, nil
}
