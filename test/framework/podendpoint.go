package framework

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// PodEndpointOf returns the PodEndpoint recorded for the Pod named pod in namespace (PodEndpoints are
// named "<node>.<Pod UID>", so tests find them by spec.podName). It returns a NotFound error when
// there is none, and an error when there are several (a stale record the agent failed to remove).
func PodEndpointOf(ctx context.Context, c client.Reader, namespace, pod string) (*networkv1alpha1.PodEndpoint, error) {
	list := &networkv1alpha1.PodEndpointList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing PodEndpoints in %s: %w", namespace, err)
	}
	var found []*networkv1alpha1.PodEndpoint
	for i := range list.Items {
		if list.Items[i].Spec.PodName == pod {
			found = append(found, &list.Items[i])
		}
	}
	switch len(found) {
	case 0:
		return nil, apierrors.NewNotFound(networkv1alpha1.GroupVersion.WithResource("podendpoints").GroupResource(), "of Pod "+namespace+"/"+pod)
	case 1:
		return found[0], nil
	}
	names := make([]string, 0, len(found))
	for _, p := range found {
		names = append(names, p.Name)
	}
	return nil, fmt.Errorf("Pod %s/%s has %d PodEndpoints %v, want one", namespace, pod, len(found), names)
}
