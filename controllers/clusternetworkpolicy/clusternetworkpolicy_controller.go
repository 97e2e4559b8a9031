package clusternetworkpolicy

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cnpstatus"
	"github.com/winnet-io/winnet/internal/servedcrd"
)

// Reconciler writes each ClusterNetworkPolicy's Realised condition from the agents' reports. It is
// the only writer of their status in winnet; agents only read the policies.
type Reconciler struct {
	// Client reads WindowsNodeNetworks and writes the policies' status.
	Client client.Client
	// Policies reads the ClusterNetworkPolicies while the cluster serves their CRD
	// (servedcrd.ClusterNetworkPolicies): the reconciler writes conditions from the time it does,
	// without a restart, and does nothing while it does not.
	Policies *servedcrd.Kind

	// digests are the states of the buckets of policies read (the nodes' reports digest them).
	digests digests
}

// SetupWithManager watches ClusterNetworkPolicies (their spec) and WindowsNodeNetworks (an agent's
// report changes every policy's condition it names, and a new one's). A policy's change reconciles
// every policy of its bucket (cnpstatus.Bucket): their nodes' digests change with it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Policies == nil {
		return errors.New("the ClusterNetworkPolicy status reconciler needs Policies")
	}
	enqueue := func(ctx context.Context, keep func(name string) bool) []reconcile.Request {
		reader := r.Policies.Reader()
		if reader == nil {
			return nil
		}
		list := &cnpv1beta1.ClusterNetworkPolicyList{}
		if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing ClusterNetworkPolicies")
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			if keep(list.Items[i].Name) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	}
	every := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return enqueue(ctx, func(string) bool { return true })
	})
	bucket := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		b := cnpstatus.Bucket(o.GetName())
		return enqueue(ctx, func(name string) bool { return cnpstatus.Bucket(name) == b })
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusternetworkpolicy").
		WatchesRawSource(r.Policies.Source(servedcrd.Watch{
			Handler: &handler.EnqueueRequestForObject{}, Predicates: []predicate.Predicate{predicate.GenerationChangedPredicate{}},
		})).
		WatchesRawSource(r.Policies.Source(servedcrd.Watch{
			Handler: bucket, Predicates: []predicate.Predicate{predicate.GenerationChangedPredicate{}},
		})).
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, every).
		Complete(r)
}

// Reconcile sets the policy's Realised condition from every node's report, once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	reader := r.Policies.Reader()
	if reader == nil {
		return ctrl.Result{}, nil // the CRD is gone, and its objects with it
	}
	p := &cnpv1beta1.ClusterNetworkPolicy{}
	if err := reader.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting ClusterNetworkPolicy %s: %w", req.Name, err)
	}
	nodes := &networkv1alpha1.WindowsNodeNetworkList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing WindowsNodeNetworks: %w", err)
	}
	compiled, err := r.compiled(ctx, reader, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := p.DeepCopy()
	setRealisedCondition(p, nodes.Items, compiled)
	if equalConditions(before, p) {
		return ctrl.Result{}, nil
	}
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing the status of ClusterNetworkPolicy %s: %w", p.Name, err)
	}
	return ctrl.Result{}, nil
}

// compiled tells whether a node whose digest of the policy's bucket is digest compiled the
// policy's current generation: the digest is the bucket's as read now, or a state of it remembered
// in which the policy had its current generation.
func (r *Reconciler) compiled(ctx context.Context, reader client.Reader, p *cnpv1beta1.ClusterNetworkPolicy) (func(digest string) bool, error) {
	list := &cnpv1beta1.ClusterNetworkPolicyList{}
	if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing ClusterNetworkPolicies: %w", err)
	}
	bucket := cnpstatus.Bucket(p.Name)
	generations := map[string]int64{}
	for i := range list.Items {
		if cnpstatus.Bucket(list.Items[i].Name) == bucket {
			generations[list.Items[i].Name] = list.Items[i].Generation
		}
	}
	// The policy as read by Get, which another read may not have caught up with yet.
	generations[p.Name] = p.Generation
	now := r.digests.observe(bucket, generations)
	return func(digest string) bool {
		if digest == now {
			return true
		}
		g, ok := r.digests.generation(bucket, digest, p.Name)
		return ok && g == p.Generation
	}, nil
}
