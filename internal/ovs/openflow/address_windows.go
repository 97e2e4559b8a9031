package openflow

// DefaultAddress is the named pipe OVS for Windows creates for a bridge;
// ofctrl dials named pipes itself.
func DefaultAddress(bridge string) string {
	return `\\.\pipe\C:openvswitchvarrunopenvswitch` + bridge + ".mgmt"
}
