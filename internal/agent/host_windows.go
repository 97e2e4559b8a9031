package agent

import "strings"

// namedPipePrefix is the prefix of local named pipes.
const namedPipePrefix = `\\.\pipe\`

// openFlowAddress is the named pipe on which ovs-vswitchd for Windows serves the bridge's OpenFlow
// management connection when its rundir is runDir. OVS builds the path a Unix socket would have,
// "<rundir>/<bridge>.mgmt", removes every '/' and '\' from it and puts \\.\pipe\ in front
// (lib/stream-windows.c: remove_slashes, LOCAL_PREFIX). That is how openflow.DefaultAddress gives
// \\.\pipe\C:openvswitchvarrunopenvswitchbr-int.mgmt for the default rundir
// C:\openvswitch\var\run\openvswitch and bridge br-int.
func openFlowAddress(runDir, bridge string) string {
	return namedPipePrefix + strings.NewReplacer(`\`, "", "/", "").Replace(runDir+"/"+bridge+".mgmt")
}
