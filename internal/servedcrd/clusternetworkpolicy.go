package servedcrd

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// ClusterNetworkPolicyCRD is the name of the ClusterNetworkPolicy CRD (network-policy-api), the one
// CustomResourceDefinition winnet-agent and winnet-controller read (RBAC: get, list and watch of it
// by name).
const ClusterNetworkPolicyCRD = clusterNetworkPolicyPlural + "." + cnpv1beta1.GroupName

const clusterNetworkPolicyPlural = "clusternetworkpolicies"

// ClusterNetworkPolicies has the manager follow the ClusterNetworkPolicy CRD and cache the
// policies (policy.networking.k8s.io/v1beta1) while the cluster serves them: the chart installs the
// CRD when the cluster has none, and another product may install it, or delete it, after winnet
// started. Whoever reads them through the Kind realises them from the time the CRD serves them to
// the time it is gone, without a restart.
func ClusterNetworkPolicies(mgr manager.Manager) (*Kind, error) {
	k, err := New(Options{
		Config: mgr.GetConfig(), Scheme: mgr.GetScheme(),
		GroupVersionKind: schema.GroupVersionKind{Group: cnpv1beta1.GroupName, Version: cnpv1beta1.GroupVersion.Version, Kind: "ClusterNetworkPolicy"},
		Plural:           clusterNetworkPolicyPlural,
		Object:           &cnpv1beta1.ClusterNetworkPolicy{},
		Transform:        cache.TransformStripManagedFields(),
		Log:              mgr.GetLogger().WithName("clusternetworkpolicy-crd"),
	})
	if err != nil {
		return nil, fmt.Errorf("following the ClusterNetworkPolicy CRD: %w", err)
	}
	if err := mgr.Add(k); err != nil {
		return nil, fmt.Errorf("adding the ClusterNetworkPolicy CRD's watch: %w", err)
	}
	return k, nil
}
