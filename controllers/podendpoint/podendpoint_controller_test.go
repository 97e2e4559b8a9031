package podendpoint

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := &Reconciler{NodeName: "n1"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	att := func(id, uid string, age time.Duration, seen bool) *Attachment {
		return &Attachment{SandboxID: id, PodUID: uid, Created: now.Add(-age), PodSeen: seen}
	}
	pep := func(sandbox string) *networkv1alpha1.PodEndpoint {
		return &networkv1alpha1.PodEndpoint{Spec: networkv1alpha1.PodEndpointSpec{SandboxID: sandbox}}
	}
	ids := func(as []*Attachment) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.SandboxID)
		}
		return out
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		pep  *networkv1alpha1.PodEndpoint
		atts []*Attachment
		live string
		gone []string
		wait time.Duration
	}{
		{name: "the Pod's attachment is live", pod: pod, atts: []*Attachment{att("s1", "u1", time.Second, false)}, live: "s1"},
		{name: "UID learnt from the Pod", pod: pod, atts: []*Attachment{att("s1", "", time.Second, false)}, live: "s1"},
		{name: "the newest sandbox wins, an older one whose DEL never came goes", pod: pod,
			atts: []*Attachment{att("old", "u1", time.Hour, true), att("new", "u1", time.Second, false)}, live: "new", gone: []string{"old"}},
		{name: "a Pod recreated under the same name", pod: pod, atts: []*Attachment{att("s1", "u0", time.Second, true)}, gone: []string{"s1"}},
		{name: "the cache still holds the Pod this sandbox replaces", pod: pod, atts: []*Attachment{att("s1", "u2", time.Second, false)}},
		{name: "a Pod seen before is gone", atts: []*Attachment{att("s1", "u1", time.Second, true)}, gone: []string{"s1"}},
		{name: "a Pod recorded in its PodEndpoint is gone", pep: pep("s1"), atts: []*Attachment{att("s1", "u1", time.Second, false)}, gone: []string{"s1"}},
		{name: "a DEL that failed half-way is finished", pod: pod, atts: []*Attachment{{SandboxID: "s1", PodUID: "u1", Created: now, Deleting: true}}, gone: []string{"s1"}},
		{name: "a Pod not seen yet is waited for", atts: []*Attachment{att("s1", "u1", time.Hour, false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var peps []*networkv1alpha1.PodEndpoint
			if tt.pep != nil {
				peps = append(peps, tt.pep)
			}
			live, gone := r.classify(tt.pod, peps, tt.atts)
			if tt.live == "" {
				g.Expect(live).To(BeNil())
			} else {
				g.Expect(live).NotTo(BeNil())
				g.Expect(live.SandboxID).To(Equal(tt.live))
			}
			g.Expect(ids(gone)).To(Equal(tt.gone))
		})
	}
}
