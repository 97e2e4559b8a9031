package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/cluster"
	"github.com/winnet-io/winnet/internal/egress"
)

// FlannelAnnotationPrefix starts the annotations flannel (and winnet's flannel interop) publishes on
// a Node; the uninstall removes them from the nodes winnet networked.
const FlannelAnnotationPrefix = "flannel.alpha.coreos.com/"

// CRDNames are winnet's CustomResourceDefinitions, which the uninstall deletes when asked (Helm
// never deletes a chart's crds/).
var CRDNames = []string{
	"windowsnodenetworks.network.winnet.io",
	"remotesubnetroutes.network.winnet.io",
	"podendpoints.network.winnet.io",
	"flannelinterops.network.winnet.io",
	"packettraces.network.winnet.io",
	"egresses.network.winnet.io",
}

// UninstallOptions configure Uninstall.
type UninstallOptions struct {
	// Namespace is the release namespace: winnet-controller's Deployment, the agents' DaemonSet and
	// the uninstall Lease are there.
	Namespace string
	// ControllerDeployment and AgentDaemonSet name winnet's workloads in Namespace.
	ControllerDeployment, AgentDaemonSet string
	// Timeout bounds the wait for the agents to give their nodes their network back, and then the
	// wait for the agents to stop.
	Timeout time.Duration
	// DeleteCRDs deletes winnet's CRDs at the end.
	DeleteCRDs bool
	// Out receives one line per step; nil discards them.
	Out io.Writer
	// PollInterval is how often the waits look again; zero means a second.
	PollInterval time.Duration
}

// ErrNodesNotRestored is wrapped by Uninstall's error when some agents did not give their node its
// network back in time: those nodes need `winnet-agent reset`.
var ErrNodesNotRestored = errors.New("some nodes did not get their network back")

// Uninstall removes winnet from the cluster, in this order:
//  1. it stops winnet-controller from deriving objects from Nodes (the Lease
//     cluster.UninstallLeaseName, owned by winnet-controller's Deployment so that it goes with it);
//  2. it deletes every WindowsNodeNetwork and waits, bounded by Timeout, until each agent has given
//     its node its network back (the finalizer is gone), reporting the nodes that did not;
//  3. it deletes the agents' DaemonSet and waits, bounded, until their Pods are gone, so that no
//     agent writes PodEndpoints any more;
//  4. it removes the remaining winnet objects (PodEndpoints, RemoteSubnetRoutes, the FlannelInterop, the
//     finalizers of WindowsNodeNetworks whose node did not finish), the flannel annotations and the
//     agents' Egress Leases of the nodes winnet networked and, with DeleteCRDs, winnet's CRDs.
//
// Running it again is harmless. It returns an error wrapping ErrNodesNotRestored, after doing every
// step, when a node did not finish: run `winnet-agent reset` on it.
func Uninstall(ctx context.Context, c client.Client, opts UninstallOptions) error {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	u := &uninstaller{c: c, opts: opts}
	ownedLease, err := u.stopController(ctx)
	if err != nil {
		return err
	}
	nodes, unfinished, err := u.deleteNodeNetworks(ctx)
	if err != nil {
		return err
	}
	if err := u.stopAgents(ctx); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{
		u.forceDeleteNodeNetworks, u.deletePodEndpoints, u.deleteRemoteSubnetRoutes, u.deleteFlannelInterops,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	if err := u.removeFlannelAnnotations(ctx, nodes); err != nil {
		return err
	}
	if err := u.deleteEgressLeases(ctx, nodes); err != nil {
		return err
	}
	if opts.DeleteCRDs {
		if err := u.deleteCRDs(ctx); err != nil {
			return err
		}
	}
	if !ownedLease {
		// No Deployment to take the Lease with it: no controller is left to stop.
		if err := c.Delete(ctx, u.lease()); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the uninstall Lease: %w", err)
		}
	}
	if len(unfinished) > 0 {
		return fmt.Errorf("%w in %s: %s; run `winnet-agent reset` on each of them", ErrNodesNotRestored, opts.Timeout, strings.Join(unfinished, ", "))
	}
	u.say("winnet is uninstalled")
	return nil
}

type uninstaller struct {
	c    client.Client
	opts UninstallOptions
}

func (u *uninstaller) say(format string, args ...any) {
	fmt.Fprintf(u.opts.Out, format+"\n", args...)
}

func (u *uninstaller) lease() *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: u.opts.Namespace, Name: cluster.UninstallLeaseName}}
}

// stopController creates the uninstall Lease, owned by winnet-controller's Deployment when there is
// one. It reports whether the Lease has that owner.
func (u *uninstaller) stopController(ctx context.Context) (bool, error) {
	lease := u.lease()
	lease.Spec.HolderIdentity = ptr.To("winnet-controller uninstall")
	dep := &appsv1.Deployment{}
	err := u.c.Get(ctx, client.ObjectKey{Namespace: u.opts.Namespace, Name: u.opts.ControllerDeployment}, dep)
	switch {
	case err == nil:
		lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("looking up Deployment %s/%s: %w", u.opts.Namespace, u.opts.ControllerDeployment, err)
	}
	if err := u.c.Create(ctx, lease); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating the uninstall Lease %s/%s: %w", u.opts.Namespace, cluster.UninstallLeaseName, err)
	}
	u.say("stopped winnet-controller from creating WindowsNodeNetworks (Lease %s/%s)", u.opts.Namespace, cluster.UninstallLeaseName)
	return len(lease.OwnerReferences) > 0, nil
}

// deleteNodeNetworks deletes every WindowsNodeNetwork and waits until they are gone. It returns the
// nodes that had one and those whose agent did not finish within the timeout.
func (u *uninstaller) deleteNodeNetworks(ctx context.Context) (nodes, unfinished []string, err error) {
	list := &networkv1alpha1.WindowsNodeNetworkList{}
	if err := u.c.List(ctx, list); meta.IsNoMatchError(err) {
		return nil, nil, nil // no CRD: nothing of winnet's is left
	} else if err != nil {
		return nil, nil, fmt.Errorf("listing WindowsNodeNetworks: %w", err)
	}
	for _, w := range list.Items {
		nodes = append(nodes, w.Name)
	}
	if len(nodes) > 0 {
		u.say("deleting the WindowsNodeNetworks of %d nodes; waiting up to %s for their agents to give each node its network back", len(nodes), u.opts.Timeout)
	}
	deadline := time.Now().Add(u.opts.Timeout)
	remaining := slices.Clone(nodes)
	for {
		left := remaining[:0]
		for _, name := range remaining {
			w := &networkv1alpha1.WindowsNodeNetwork{}
			err := u.c.Get(ctx, client.ObjectKey{Name: name}, w)
			switch {
			case apierrors.IsNotFound(err):
				u.say("node %s: network given back", name)
				continue
			case err != nil:
				return nil, nil, fmt.Errorf("reading WindowsNodeNetwork %s: %w", name, err)
			case w.DeletionTimestamp.IsZero():
				if err := u.c.Delete(ctx, w); client.IgnoreNotFound(err) != nil {
					return nil, nil, fmt.Errorf("deleting WindowsNodeNetwork %s: %w", name, err)
				}
			}
			left = append(left, name)
		}
		remaining = left
		if len(remaining) == 0 || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(u.opts.PollInterval):
		}
	}
	for _, name := range remaining {
		u.say("node %s: its agent did not give the node its network back within %s%s; run `winnet-agent reset` on it", name, u.opts.Timeout, u.readiness(ctx, name))
	}
	return nodes, remaining, nil
}

// readiness describes the Ready condition of a node's WindowsNodeNetwork, for a report.
func (u *uninstaller) readiness(ctx context.Context, name string) string {
	w := &networkv1alpha1.WindowsNodeNetwork{}
	if u.c.Get(ctx, client.ObjectKey{Name: name}, w) != nil {
		return ""
	}
	if c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.ReadyCondition); c != nil {
		return fmt.Sprintf(" (Ready=%s %s: %s)", c.Status, c.Reason, c.Message)
	}
	return ""
}

// stopAgents deletes the agents' DaemonSet and waits, bounded by the timeout, until its Pods are
// gone: a running agent re-creates the PodEndpoints of the Pods it attached.
func (u *uninstaller) stopAgents(ctx context.Context) error {
	ds := &appsv1.DaemonSet{}
	err := u.c.Get(ctx, client.ObjectKey{Namespace: u.opts.Namespace, Name: u.opts.AgentDaemonSet}, ds)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("looking up DaemonSet %s/%s: %w", u.opts.Namespace, u.opts.AgentDaemonSet, err)
	}
	if err := u.c.Delete(ctx, ds); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting DaemonSet %s/%s: %w", u.opts.Namespace, u.opts.AgentDaemonSet, err)
	}
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return fmt.Errorf("DaemonSet %s/%s has an invalid selector: %w", u.opts.Namespace, u.opts.AgentDaemonSet, err)
	}
	u.say("deleted the agents' DaemonSet %s/%s; waiting up to %s for the agents to stop", u.opts.Namespace, ds.Name, u.opts.Timeout)
	for deadline := time.Now().Add(u.opts.Timeout); ; {
		pods := &corev1.PodList{}
		if err := u.c.List(ctx, pods, client.InNamespace(u.opts.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return fmt.Errorf("listing the agents' Pods: %w", err)
		}
		if len(pods.Items) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			u.say("%d agent Pods are still there after %s; going on", len(pods.Items), u.opts.Timeout)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(u.opts.PollInterval):
		}
	}
}

// forceDeleteNodeNetworks removes the WindowsNodeNetworks whose agent did not finish: their
// finalizer goes, as no agent is left to remove it.
func (u *uninstaller) forceDeleteNodeNetworks(ctx context.Context) error {
	return u.deleteAll(ctx, &networkv1alpha1.WindowsNodeNetworkList{}, "WindowsNodeNetwork")
}

func (u *uninstaller) deletePodEndpoints(ctx context.Context) error {
	return u.deleteAll(ctx, &networkv1alpha1.PodEndpointList{}, "PodEndpoint")
}

func (u *uninstaller) deleteRemoteSubnetRoutes(ctx context.Context) error {
	return u.deleteAll(ctx, &networkv1alpha1.RemoteSubnetRouteList{}, "RemoteSubnetRoute")
}

// deleteEgressLeases deletes the agents' Egress Leases (egress.LeaseName) of the nodes winnet
// networked, by name: the agents are gone, nothing renews them. The uninstall's Role already deletes
// Leases in the release namespace; it lists none.
func (u *uninstaller) deleteEgressLeases(ctx context.Context, nodes []string) error {
	for _, node := range nodes {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: u.opts.Namespace, Name: egress.LeaseName(node)}}
		if err := u.c.Delete(ctx, l); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the Egress Lease of node %s: %w", node, err)
		}
	}
	return nil
}

func (u *uninstaller) deleteFlannelInterops(ctx context.Context) error {
	return u.deleteAll(ctx, &networkv1alpha1.FlannelInteropList{}, "FlannelInterop")
}

// deleteAll deletes every object of the list's kind, in every namespace, with its finalizers: no
// agent is left to act on them.
func (u *uninstaller) deleteAll(ctx context.Context, list client.ObjectList, kind string) error {
	if err := u.c.List(ctx, list); meta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("listing %ss: %w", kind, err)
	}
	objs, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("reading the %s list: %w", kind, err)
	}
	for _, o := range objs {
		obj := o.(client.Object)
		key := client.ObjectKeyFromObject(obj)
		if len(obj.GetFinalizers()) > 0 {
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
			if err := u.c.Patch(ctx, obj, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("removing the finalizers of %s %s: %w", kind, key, err)
			}
		}
		if err := u.c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s %s: %w", kind, key, err)
		}
		u.say("deleted %s %s", kind, strings.TrimPrefix(key.String(), "/"))
	}
	return nil
}

// removeFlannelAnnotations removes the flannel annotations of the nodes winnet networked: no
// flannel runs on them, so any such record is winnet's.
func (u *uninstaller) removeFlannelAnnotations(ctx context.Context, nodes []string) error {
	for _, name := range nodes {
		node := &corev1.Node{}
		if err := u.c.Get(ctx, client.ObjectKey{Name: name}, node); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading Node %s: %w", name, err)
		}
		before := node.DeepCopy()
		var removed []string
		prefixes := []string{FlannelAnnotationPrefix}
		if p := cluster.RecordPrefix(node.Annotations); p != "" {
			prefixes = append(prefixes, p+"/") // a record written under a custom prefix
		}
		for k := range node.Annotations {
			if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) || k == cluster.FlannelRecordAnnotation {
				delete(node.Annotations, k)
				removed = append(removed, k)
			}
		}
		if len(removed) == 0 {
			continue
		}
		// Through nodes/status, as winnet-controller wrote them: the uninstall may not patch Nodes.
		if err := u.c.Status().Patch(ctx, node, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("removing the flannel annotations of Node %s: %w", name, err)
		}
		slices.Sort(removed)
		u.say("node %s: removed annotations %s", name, strings.Join(removed, ", "))
	}
	return nil
}

// deleteCRDs deletes winnet's CRDs and waits, bounded, until the API server has removed them.
func (u *uninstaller) deleteCRDs(ctx context.Context) error {
	for _, name := range CRDNames {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := u.c.Delete(ctx, crd); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("deleting CRD %s: %w", name, err)
		}
		u.say("deleted CRD %s", name)
	}
	for deadline := time.Now().Add(u.opts.Timeout); ; {
		left := 0
		for _, name := range CRDNames {
			if err := u.c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); err == nil {
				left++
			} else if !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading CRD %s: %w", name, err)
			}
		}
		if left == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%d of winnet's CRDs are still there after %s", left, u.opts.Timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(u.opts.PollInterval):
		}
	}
}
