package service

import (
	"reflect"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// fullService is a Service with every field the API server may give it, the ones the proxy reads
// and the ones it does not.
func fullService(labels map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u-1", ResourceVersion: "7", Generation: 2,
			Labels:          labels,
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"big":"copy"}`},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", UID: "o-1"}},
			Finalizers:      []string{"service.kubernetes.io/load-balancer-cleanup"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Selector:                 map[string]string{"app": "web"},
			ExternalIPs:              []string{"192.0.2.10"},
			LoadBalancerSourceRanges: []string{"198.51.100.0/24"},
			SessionAffinity:          corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:    &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
			ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicyLocal,
			InternalTrafficPolicy:    ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
			}},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}},
			Conditions:   []metav1.Condition{{Type: "LoadBalancerReady", Status: metav1.ConditionTrue}}},
	}
}

// fullSlice is an EndpointSlice of the Service with every endpoint field set.
func fullSlice(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, GenerateName: "web-", UID: types.UID("s-" + name), ResourceVersion: "9",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app": "web"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-30T00:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "web", UID: "u-1"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](5353)}},
		Endpoints: eps,
	}
}

func fullEndpoint(ip, node string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node), Hostname: ptr.To("h"), Zone: ptr.To("z1"),
		TargetRef:          &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-" + ip},
		Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}},
		DeprecatedTopology: map[string]string{"kubernetes.io/hostname": node},
		Conditions:         discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)}}
}

// TestTrimKeepsWhatTheProxyReads checks that the cache's transforms drop only what the proxy does
// not read: the ports, endpoints and NodePorts computed from trimmed objects are those computed from
// whole ones, and a Service another proxy serves is still skipped.
func TestTrimKeepsWhatTheProxyReads(t *testing.T) {
	g := NewWithT(t)
	for _, labels := range []map[string]string{
		{"app": "web", "team": "a"},
		{"app": "web", ServiceProxyNameLabel: "other"},
		{HeadlessLabel: ""},
		nil,
	} {
		whole := fullService(labels)
		wholeSlices := []discoveryv1.EndpointSlice{
			*fullSlice("a", fullEndpoint("10.244.1.5", "node-a", true, true, false), fullEndpoint("10.244.2.7", "node-b", true, true, false)),
			*fullSlice("b", fullEndpoint("10.244.2.8", "node-b", false, true, true), fullEndpoint("10.244.1.9", "node-a", false, false, false)),
		}
		trimmed := whole.DeepCopy()
		out, err := TrimService(trimmed)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(BeIdenticalTo(trimmed))
		var trimmedSlices []discoveryv1.EndpointSlice
		for i := range wholeSlices {
			s := wholeSlices[i].DeepCopy()
			_, err := TrimEndpointSlice(s)
			g.Expect(err).NotTo(HaveOccurred())
			trimmedSlices = append(trimmedSlices, *s)
		}

		g.Expect(skipReason(trimmed)).To(Equal(skipReason(whole)), "labels %v", labels)
		for _, node := range []string{"node-a", "node-b"} {
			want, got := desiredPorts(whole, wholeSlices, node), desiredPorts(trimmed, trimmedSlices, node)
			g.Expect(reflect.DeepEqual(got, want)).To(BeTrue(), "on %s, labels %v:\ngot  %+v\nwant %+v", node, labels, got, want)
		}
		g.Expect(serviceNodePorts(trimmed)).To(Equal(serviceNodePorts(whole)))
		g.Expect(serviceInputs(trimmed, trimmedSlices)).To(Equal(serviceInputs(whole, wholeSlices)))

		// What goes.
		g.Expect(trimmed.Annotations).To(BeNil())
		g.Expect(trimmed.Spec.Selector).To(BeNil())
		g.Expect(trimmed.OwnerReferences).To(BeNil())
		g.Expect(trimmed.ManagedFields).To(BeNil())
		g.Expect(trimmed.Status.Conditions).To(BeNil())
		g.Expect(trimmed.Labels).NotTo(HaveKey("app"))
		for _, s := range trimmedSlices {
			g.Expect(s.Labels).To(Equal(map[string]string{discoveryv1.LabelServiceName: "web"}))
			g.Expect(s.Annotations).To(BeNil())
			g.Expect(s.OwnerReferences).To(BeNil())
			for _, e := range s.Endpoints {
				g.Expect(e.TargetRef).To(BeNil())
				g.Expect(e.Zone).To(BeNil())
				g.Expect(e.Hints).To(BeNil())
				g.Expect(e.DeprecatedTopology).To(BeNil())
			}
		}
	}
	// Another type passes through untouched.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}
	out, err := TrimService(pod)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.Pod).Annotations).To(HaveKey("a"))
}
