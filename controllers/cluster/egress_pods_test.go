package cluster

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTrimPodMetadata: of a Pod's metadata winnet-controller keeps its name, namespace, labels and
// resourceVersion; its annotations, owners, UID and the rest (most of a Pod's metadata) go.
func TestTrimPodMetadata(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", ResourceVersion: "42", UID: "u",
		Labels:          map[string]string{"app": "web"},
		Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web"}}, GenerateName: "web-", Finalizers: []string{"f"}}}
	out, err := trimPodMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	want := metav1.ObjectMeta{Name: "web-0", Namespace: "shop", ResourceVersion: "42", Labels: map[string]string{"app": "web"}}
	if got.Name != want.Name || got.Namespace != want.Namespace || got.ResourceVersion != want.ResourceVersion || got.Labels["app"] != "web" ||
		len(got.Labels) != 1 || got.UID != "" || got.Annotations != nil || got.OwnerReferences != nil || got.GenerateName != "" || got.Finalizers != nil {
		t.Errorf("trimmed to %+v, want only %+v", got.ObjectMeta, want)
	}
	if !podLabelsChanged(in, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}}}) {
		t.Error("a label change is not seen")
	}
	if podLabelsChanged(in, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, ResourceVersion: "43"}}) {
		t.Error("an update that keeps the labels wakes the reconciler")
	}
}
