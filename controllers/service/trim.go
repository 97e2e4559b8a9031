package service

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The agent caches every Service and EndpointSlice it serves: 10,000 Services hold 50,000
// endpoints or more. TrimService and TrimEndpointSlice are the cache's transforms: they drop, as
// each object arrives, what no reconciler of the agent reads, so that the cache holds the fields
// the proxy needs and not the rest (bench-scale, issue 64). Whatever a reconciler starts to read
// must be kept here too (TestTrimKeepsWhatTheProxyReads).

// TrimService drops of a Service its managed fields, annotations, owner references and finalizers,
// every label but the two that take it out of the proxy's hands (ServiceProxyNameLabel,
// HeadlessLabel; the API server's selector already leaves such Services out), its Pod selector (the
// endpoints come from its EndpointSlices) and its status conditions (its load balancer ingress
// stays).
func TrimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	svc.ManagedFields, svc.Annotations, svc.OwnerReferences, svc.Finalizers = nil, nil, nil, nil
	svc.Labels = keepLabels(svc.Labels, ServiceProxyNameLabel, HeadlessLabel)
	svc.Spec.Selector = nil
	svc.Status.Conditions = nil
	return svc, nil
}

// TrimEndpointSlice drops of an EndpointSlice its managed fields, annotations, owner references,
// generated name and every label but its Service's name (discoveryv1.LabelServiceName, by which the
// reconcilers find a Service's slices), and of each endpoint what the proxy does not read: its
// Pod reference, hostname, zone, hints and deprecated topology. The endpoints' addresses,
// conditions and node stay.
func TrimEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	s.ManagedFields, s.Annotations, s.OwnerReferences, s.GenerateName = nil, nil, nil, ""
	s.Labels = keepLabels(s.Labels, discoveryv1.LabelServiceName)
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		e.TargetRef, e.Hostname, e.Zone, e.Hints, e.DeprecatedTopology = nil, nil, nil, nil, nil
	}
	return s, nil
}

// keepLabels deletes from labels every label but keys, in place (a new map would cost as much as
// the decoded one: a small map's size does not depend on its entries), and returns it, nil when
// none is left.
func keepLabels(labels map[string]string, keys ...string) map[string]string {
	maps.DeleteFunc(labels, func(k, _ string) bool { return !slices.Contains(keys, k) })
	if len(labels) == 0 {
		return nil
	}
	return labels
}
