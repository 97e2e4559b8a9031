//go:build !linux && !windows

package podendpoint

import (
	"context"
	"errors"
	"net"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// podPortType is the type of a Pod's OVS port; this platform runs no agent.
const podPortType = ovsdb.PortTypeInternal

func setSwitchPort(context.Context, hostnet.Interface, string, bool) error {
	return errors.ErrUnsupported
}

func configurePodInterface(string, net.HardwareAddr, int) (string, error) {
	return "", errors.ErrUnsupported
}
