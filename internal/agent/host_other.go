//go:build !windows

package agent

import "path/filepath"

// openFlowAddress is the Unix socket on which ovs-vswitchd serves the bridge's OpenFlow management
// connection when its rundir is runDir.
func openFlowAddress(runDir, bridge string) string {
	return filepath.Join(runDir, bridge+".mgmt")
}
