//go:build !linux && !windows

package podendpoint

import (
	"context"
	"errors"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// podPortType is the type of a Pod's OVS port; this platform runs no agent.
const podPortType = ovsdb.PortTypeInternal

func setSwitchPort(context.Context, HostNet, string, bool) error {
	return errors.ErrUnsupported
}

func vnicName(port string) string { return port }

func (p *Pods) configurePodInterface(context.Context, *Attachment) error {
	return errors.ErrUnsupported
}
