package nodenetwork

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// reconcileDelete gives the host its network back — the node IP, routes and MAC return to the
// uplink — and removes everything winnet created: the bridge with its ports and flows, and the HNS
// network. Each step is idempotent; the finalizer goes only when all succeeded.
func (r *Reconciler) reconcileDelete(ctx context.Context, wnn *networkv1alpha1.WindowsNodeNetwork) error {
	if !controllerutil.ContainsFinalizer(wnn, Finalizer) {
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	bridge := string(wnn.Spec.Bridge.Name)
	uplink, err := r.uplinkForTeardown(ctx, wnn)
	if err != nil {
		return err
	}
	if uplink.Index != 0 {
		log.Info("Giving the host's addresses back to the uplink", "bridge", bridge, "uplink", uplink.Name)
		if err := r.giveBackAddresses(ctx, bridge, uplink); err != nil {
			return err
		}
	}
	r.flows.close()
	if _, err := r.Host.OVSDB.DeleteBridge(ctx, bridge); err != nil {
		return fmt.Errorf("deleting bridge %q: %w", bridge, err)
	}
	if err := waitLinkGone(ctx, r.Host.Net, bridge); err != nil {
		return err
	}
	network, err := r.Host.HNS.GetNetworkByName(ctx, wnn.Spec.HNSNetwork.Name)
	switch {
	case err == nil:
		if err := r.Host.HNS.DeleteNetwork(ctx, network.ID); err != nil {
			return fmt.Errorf("deleting HNS network %s: %w", network.Name, err)
		}
	case !errors.Is(err, hns.ErrNotFound):
		return fmt.Errorf("looking up HNS network %s: %w", wnn.Spec.HNSNetwork.Name, err)
	}
	r.Recorder.Eventf(wnn, nil, corev1.EventTypeNormal, networkv1alpha1.DeletingReason, "Delete",
		"Removed bridge %s and HNS network %s; the host's network is back on %s", bridge, wnn.Spec.HNSNetwork.Name, uplink.Name)
	controllerutil.RemoveFinalizer(wnn, Finalizer)
	return r.Client.Update(ctx, wnn)
}

// uplinkForTeardown finds the uplink the host's addresses go back to: the configured one, or the one
// the bridge records. Without either there is nothing to give back.
func (r *Reconciler) uplinkForTeardown(ctx context.Context, wnn *networkv1alpha1.WindowsNodeNetwork) (hostnet.Link, error) {
	name := wnn.Spec.Uplink.Interface
	if name == "" {
		ids, err := r.Host.OVSDB.BridgeExternalIDs(ctx, string(wnn.Spec.Bridge.Name))
		if errors.Is(err, ovsdb.ErrNotFound) {
			return hostnet.Link{}, nil // no bridge: nothing was moved
		} else if err != nil {
			return hostnet.Link{}, fmt.Errorf("reading bridge %s: %w", wnn.Spec.Bridge.Name, err)
		}
		name = ids[uplinkKey]
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
