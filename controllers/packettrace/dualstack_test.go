package packettrace

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestServiceIPv4: a trace to a Service goes to its IPv4 ClusterIP, whatever the order of its
// ClusterIPs; an IPv6-only Service has none.
func TestServiceIPv4(t *testing.T) {
	for _, tc := range []struct {
		name string
		ips  []string
		want string
	}{
		{"IPv4", []string{"10.96.0.10"}, "10.96.0.10"},
		{"dual-stack, IPv4 first", []string{"10.96.0.10", "fd00:10:96::10"}, "10.96.0.10"},
		{"dual-stack, IPv6 first", []string{"fd00:10:96::10", "10.96.0.10"}, "10.96.0.10"},
		{"IPv6 only", []string{"fd00:10:96::10"}, "invalid IP"},
		{"headless", []string{"None"}, "invalid IP"},
	} {
		svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: tc.ips[0], ClusterIPs: tc.ips}}
		if got := serviceIPv4(svc); got.String() != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}
