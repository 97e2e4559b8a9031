package podendpoint

import (
	"context"
	"net"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// podPortType is the type of a Pod's OVS port: on Windows an internal port that OVS binds to the
// HNS endpoint's vNIC of the same name.
const podPortType = ovsdb.PortTypeInternal

// setSwitchPort does nothing on Windows: the Hyper-V switch owns the endpoint's port.
func setSwitchPort(context.Context, hostnet.Interface, string, bool) error { return nil }

// configurePodInterface returns the interface name the runtime asked for: HNS configures the
// endpoint's vNIC in the container's compartment, MTU included, from the network.
func configurePodInterface(string, net.HardwareAddr, int) (string, error) { return "", nil }
