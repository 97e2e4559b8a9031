package podendpoint

import (
	"context"
	"fmt"

	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// podPortType is the type of a Pod's OVS port: on Windows an internal port that OVS binds to the
// HNS endpoint's vNIC of the same name.
const podPortType = ovsdb.PortTypeInternal

// setSwitchPort does nothing on Windows: the Hyper-V switch owns the endpoint's port.
func setSwitchPort(context.Context, HostNet, string, bool) error { return nil }

// vnicName is the alias Windows gives the vNIC of the HNS endpoint named port on the host.
func vnicName(port string) string { return hns.WindowsManagementVNICName(port) }

// configurePodInterface sets the Pod's MTU on the endpoint's vNIC through iphlpapi, as Antrea does
// once the vNIC exists: HNS does not set it from the endpoint.
func (p *Pods) configurePodInterface(ctx context.Context, a *Attachment) error {
	if a.MTU <= 0 {
		return nil
	}
	link, err := p.opts.Host.Net.LinkByName(ctx, vnicName(a.EndpointName))
	if err != nil {
		return fmt.Errorf("finding the vNIC of endpoint %s: %w", a.EndpointName, err)
	}
	if err := p.opts.Host.Net.SetMTU(ctx, link.Index, a.MTU); err != nil {
		return fmt.Errorf("setting MTU %d on the vNIC of endpoint %s: %w", a.MTU, a.EndpointName, err)
	}
	return nil
}
