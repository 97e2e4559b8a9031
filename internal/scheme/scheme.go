// Package scheme builds the runtime.Scheme shared by winnet's binaries and tests: the core
// Kubernetes types, network.winnet.io and the network-policy-api's ClusterNetworkPolicy.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// New returns a scheme holding the core Kubernetes types, network.winnet.io/v1alpha1 and
// policy.networking.k8s.io/v1beta1 (ClusterNetworkPolicy, sigs.k8s.io/network-policy-api).
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding core types to the scheme: %w", err)
	}
	if err := networkv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding %s to the scheme: %w", networkv1alpha1.GroupVersion, err)
	}
	if err := cnpv1beta1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding %s to the scheme: %w", cnpv1beta1.GroupVersion, err)
	}
	return s, nil
}
