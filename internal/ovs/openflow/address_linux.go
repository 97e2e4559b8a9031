package openflow

// DefaultAddress is the management socket ovs-vswitchd creates for a bridge on Linux.
func DefaultAddress(bridge string) string { return "/var/run/openvswitch/" + bridge + ".mgmt" }
