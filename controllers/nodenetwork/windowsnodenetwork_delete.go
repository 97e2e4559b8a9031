package nodenetwork

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// reconcileDelete gives the host its network back in the Windows order: the bridge goes first,
// then the HNS network, whose deletion removes the management vNIC and gives the adapter its IP
// configuration back. The finalizer goes only once the adapter holds the node IP again (re-added
// from the agent's record if HNS did not give it back). Each step is idempotent.
func (r *Reconciler) reconcileDelete(ctx context.Context, wnn *networkv1alpha1.WindowsNodeNetwork) error {
	if !controllerutil.ContainsFinalizer(wnn, Finalizer) {
		return nil
	}
	// The node network is going: nothing built on it (Pod ADDs, the conflist) may use it any more.
	r.state().setRealized(nil)
	log := ctrl.LoggerFrom(ctx)
	bridge := string(wnn.Spec.Bridge.Name)
	uplink, err := r.uplinkForTeardown(ctx, wnn)
	if err != nil {
		return err
	}
	log.Info("Deleting the bridge", "bridge", bridge)
	r.flows.close()
	if _, err := r.Host.OVSDB.DeleteBridge(ctx, bridge); err != nil {
		return fmt.Errorf("deleting bridge %q: %w", bridge, err)
	}
	if uplink.Index != 0 {
		// The adapter is a host interface again (a no-op on Windows, where the switch owned it).
		if err := r.Host.Net.SetSwitchPort(ctx, uplink.Index, false); err != nil {
			return err
		}
	}
	network, err := r.Host.HNS.GetNetworkByName(ctx, wnn.Spec.HNSNetwork.Name)
	switch {
	case err == nil:
		log.Info("Deleting the HNS network", "network", network.Name)
		if err := r.Host.HNS.DeleteNetwork(ctx, network.ID); err != nil {
			return fmt.Errorf("deleting HNS network %s: %w", network.Name, err)
		}
	case !errors.Is(err, hns.ErrNotFound):
		return fmt.Errorf("looking up HNS network %s: %w", wnn.Spec.HNSNetwork.Name, err)
	}
	if uplink.Index != 0 {
		if err := r.verifyAdapterRestored(ctx, wnn, uplink); err != nil {
			return err
		}
		if err := r.adapters.delete(uplink.Name); err != nil {
			return err
		}
	}
	if r.Teardown != nil {
		if err := r.Teardown.NodeNetworkRemoved(ctx); err != nil {
			return fmt.Errorf("retiring the node's CNI configuration: %w", err)
		}
	}
	r.Recorder.Eventf(wnn, nil, corev1.EventTypeNormal, networkv1alpha1.DeletingReason, "Delete",
		"Removed bridge %s and HNS network %s; the host's network is back on %s", bridge, wnn.Spec.HNSNetwork.Name, uplink.Name)
	controllerutil.RemoveFinalizer(wnn, Finalizer)
	return r.Client.Update(ctx, wnn)
}

// verifyAdapterRestored waits, bounded, for the adapter to hold the node IP again after HNS deleted
// the network, and re-adds the recorded configuration when HNS did not give it back.
func (r *Reconciler) verifyAdapterRestored(ctx context.Context, wnn *networkv1alpha1.WindowsNodeNetwork, uplink hostnet.Link) error {
	cfg, known, err := r.adapters.get(uplink.Name)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(string(wnn.Spec.NodeIP))
	if err != nil {
		if !known {
			return nil // neither a node IP nor a record to check against
		}
		for _, a := range cfg.Addresses {
			if a.Addr().Is4() {
				ip = a.Addr()
				break
			}
		}
	}
	if !known {
		// Nothing to re-apply: only wait for HNS to give the node IP back.
		cfg = hostnet.IPConfig{}
	}
	reapplied, err := RestoreAdapter(ctx, r.Host.Net, uplink, cfg, ip, AdapterIPWait)
	if reapplied {
		ctrl.LoggerFrom(ctx).Info("Re-applied the adapter's recorded IP configuration: HNS did not give it back", "adapter", uplink.Name)
	}
	if err != nil && !known {
		return fmt.Errorf("adapter %s did not get the node IP %s back after the HNS network was deleted, and winnet has no record of its configuration: %w", uplink.Name, ip, err)
	}
	return err
}

// uplinkForTeardown finds the uplink the host's addresses go back to: the configured one, or the one
// the bridge records. Without either there is nothing to give back.
func (r *Reconciler) uplinkForTeardown(ctx context.Context, wnn *networkv1alpha1.WindowsNodeNetwork) (hostnet.Link, error) {
	name := wnn.Spec.Uplink.Interface
	if name == "" {
		if network, err := r.Host.HNS.GetNetworkByName(ctx, wnn.Spec.HNSNetwork.Name); err == nil {
			name = network.AdapterName
		}
	}
	if name == "" {
		ids, err := r.Host.OVSDB.BridgeExternalIDs(ctx, string(wnn.Spec.Bridge.Name))
		if errors.Is(err, ovsdb.ErrNotFound) {
			return hostnet.Link{}, nil // no bridge: nothing was moved
		} else if err != nil {
			return hostnet.Link{}, fmt.Errorf("reading bridge %s: %w", wnn.Spec.Bridge.Name, err)
		}
		name = ids[UplinkKey]
	}
	if name == "" {
		return hostnet.Link{}, nil
	}
	link, err := r.Host.Net.LinkByName(ctx, name)
	if errors.Is(err, hostnet.ErrNotFound) {
		return hostnet.Link{}, nil
	}
	return link, err
}
