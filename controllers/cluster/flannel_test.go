package cluster

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestRecordPatch: the record goes in one patch, a record under another prefix (the FlannelInterop's
// annotationPrefix changed) is withdrawn in the same patch, and turning interop off withdraws the record under
// the prefix it was written with.
func TestRecordPatch(t *testing.T) {
	interop := func(prefix string) FlannelInterop {
		return flannelInteropFrom(&networkv1alpha1.FlannelInterop{Spec: networkv1alpha1.FlannelInteropSpec{VNI: 4096, AnnotationPrefix: prefix}})
	}
	record := func(prefix string) map[string]string {
		return map[string]string{
			prefix + "/kube-subnet-manager": "true", prefix + "/backend-type": "vxlan",
			prefix + "/backend-data": `{"VNI":4096,"VtepMAC":"0e:00:00:00:00:01"}`, prefix + "/public-ip": "192.168.77.11",
			FlannelRecordAnnotation: prefix,
		}
	}
	with := func(m map[string]string, extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	const def, custom = DefaultFlannelAnnotationPrefix, "flannel.example.com"
	legacy := with(record(def), map[string]string{FlannelRecordAnnotation: "true"}) // written before the prefix was recorded
	cases := []struct {
		name    string
		have    map[string]string
		f       FlannelInterop
		want    map[string]string
		changes map[string]any // nil: no patch
	}{
		{name: "new record, whole", have: map[string]string{"other": "x"}, f: interop(def), want: record(def), changes: toChanges(record(def), nil)},
		{name: "record in place", have: with(record(def), map[string]string{"other": "x"}), f: interop(def), want: record(def)},
		{name: "one key changed, the whole record sent", have: with(record(def), map[string]string{def + "/public-ip": "192.168.77.99"}), f: interop(def), want: record(def),
			changes: toChanges(record(def), nil)},
		{name: "prefix changed: old record withdrawn, new one written", have: record(def), f: interop(custom), want: record(custom),
			changes: toChanges(record(custom), []string{def + "/kube-subnet-manager", def + "/backend-type", def + "/backend-data", def + "/public-ip"})},
		{name: "interop off withdraws under the recorded prefix", have: with(record(custom), map[string]string{"other": "x"}), f: flannelInteropFrom(nil),
			changes: toChanges(nil, []string{custom + "/kube-subnet-manager", custom + "/backend-type", custom + "/backend-data", custom + "/public-ip", FlannelRecordAnnotation})},
		{name: "legacy record withdrawn under the default prefix", have: legacy, f: flannelInteropFrom(nil),
			changes: toChanges(nil, []string{def + "/kube-subnet-manager", def + "/backend-type", def + "/backend-data", def + "/public-ip", FlannelRecordAnnotation})},
		{name: "a flanneld node's own record is never withdrawn", have: with(record(def), map[string]string{FlannelRecordAnnotation: ""}), f: flannelInteropFrom(nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: tc.have}}
			patch := tc.f.recordPatch(node, tc.want)
			if tc.changes == nil {
				g.Expect(patch).To(BeNil(), "%s", patch)
				return
			}
			var got struct {
				Metadata struct {
					Annotations map[string]any `json:"annotations"`
				} `json:"metadata"`
			}
			g.Expect(json.Unmarshal(patch, &got)).To(Succeed())
			g.Expect(got.Metadata.Annotations).To(Equal(tc.changes))
		})
	}
}

// toChanges is a merge patch's annotations: set every key of set, remove every key of remove.
func toChanges(set map[string]string, remove []string) map[string]any {
	out := map[string]any{}
	for _, k := range remove {
		out[k] = nil
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}
