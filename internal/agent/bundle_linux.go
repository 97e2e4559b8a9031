package agent

import (
	"context"
	"path/filepath"

	"github.com/winnet-io/winnet/internal/securefs"
)

// hnsMemberName is the bundle's member of HNS: on Linux the HNS simulator's state file, which holds
// its networks and endpoints (read as the agent reads its state: no link, owner-only, bounded).
const hnsMemberName = "simulator-state.json"

func hnsSnapshot(_ context.Context, host HostOptions, _ string) ([]byte, error) {
	return securefs.ReadFile(filepath.Join(host.StateDir, "hns-sim.json"), securefs.Private, 64<<20)
}
