package cluster

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// UninstallLeaseName is the Lease that `winnet-controller uninstall` (the Helm chart's pre-delete
// hook) creates in winnet-controller's namespace before it deletes the WindowsNodeNetworks: while it
// exists, winnet-controller derives nothing from Nodes, so that what the uninstall deletes stays
// deleted. A Lease because winnet-controller may already read Leases (leader election): the stop
// signal needs no permission of its own. It goes with winnet-controller's Deployment (owner
// reference) or at the end of the uninstall when there is none.
const UninstallLeaseName = "winnet-uninstall"

// UninstallSignal reports whether an uninstall is under way: whether the Lease UninstallLeaseName
// exists in Namespace. It reads through an uncached Reader (the manager's API reader), so that a
// reconcile that starts after the uninstall created the Lease sees it.
type UninstallSignal struct {
	Reader    client.Reader
	Namespace string
}

// Uninstalling reports whether the uninstall Lease exists.
func (s UninstallSignal) Uninstalling(ctx context.Context) (bool, error) {
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: UninstallLeaseName}, &coordinationv1.Lease{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking up the uninstall Lease %s/%s: %w", s.Namespace, UninstallLeaseName, err)
	}
}
