package cluster

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// nodeFactsChanged passes a Node's update only when something winnet-controller derives from changed:
// the labels it reads, readLabels (which nodes are Windows nodes: the WindowsNodeSelector's keys and
// kubernetes.io/os), annotations (flannel's lease and winnet's record), Pod CIDRs, addresses, or the
// start of its deletion. kubelet's heartbeats (conditions, capacity, images) change none of them: at
// 5,000 nodes they would otherwise queue work ahead of a new node's routes. Nor do other labels:
// kube-controller-manager adds beta.kubernetes.io/os to every new Node some seconds after it
// registers, which queued each for an apply that changed nothing (make bench-scale).
func nodeFactsChanged(readLabels []string) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Node)
		cur, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return !sameLabels(old.Labels, cur.Labels, readLabels) || !sameReadAnnotations(old.Annotations, cur.Annotations) ||
			old.Spec.PodCIDR != cur.Spec.PodCIDR || !slices.Equal(old.Spec.PodCIDRs, cur.Spec.PodCIDRs) ||
			!slices.Equal(old.Status.Addresses, cur.Status.Addresses) ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero()
	}}
}

// sameLabels reports whether two label sets agree on every key of keys (absent in both counts as
// agreeing).
func sameLabels(a, b map[string]string, keys []string) bool {
	for _, k := range keys {
		v, ok := a[k]
		w, ok2 := b[k]
		if ok != ok2 || v != w {
			return false
		}
	}
	return true
}

// nodeLabelsRead are the keys of a Node's labels the node reconciler reads: those sel (the
// WindowsNodeSelector; nil for the default) selects on, and kubernetes.io/os (flannel's VNI check).
func nodeLabelsRead(sel labels.Selector) []string {
	if sel == nil {
		sel = DefaultWindowsNodeSelector
	}
	keys := []string{corev1.LabelOSStable}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if !slices.Contains(keys, r.Key()) {
			keys = append(keys, r.Key())
		}
	}
	return keys
}

// sameReadAnnotations compares two Nodes' annotations but those of Kubernetes' own domains
// (kubernetes.io, k8s.io and their subdomains), which winnet-controller never reads and Kubernetes'
// controllers write: kube-controller-manager's TTL controller sets node.alpha.kubernetes.io/ttl on
// every new Node, and on every Node again each time the cluster's size crosses one of its steps (100,
// 500, 1,000, 2,000 Nodes...), which queued each Node for an apply that changed nothing (make
// bench-scale: 3 writes per Node added where 2 do). flanneld's annotations (FlannelInterop's
// annotationPrefix, flannel.alpha.coreos.com by default) and winnet's record are in other domains.
func sameReadAnnotations(a, b map[string]string) bool {
	count := 0
	for k, v := range a {
		if kubernetesDomain(k) {
			continue
		}
		count++
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	for k := range b {
		if !kubernetesDomain(k) {
			count--
		}
	}
	return count == 0
}

// kubernetesDomain reports whether an annotation key's prefix is kubernetes.io, k8s.io or a
// subdomain of either.
func kubernetesDomain(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// nodeCIDRsChanged passes a Node's update only when its Pod CIDRs or its deletion changed: all the
// route conflict check reads of a Node.
func nodeCIDRsChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Node)
		cur, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return old.Spec.PodCIDR != cur.Spec.PodCIDR || !slices.Equal(old.Spec.PodCIDRs, cur.Spec.PodCIDRs) ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero()
	}}
}

// routeChangedByOthers passes what may undo winnet-controller's apply of a RemoteSubnetRoute (its
// metadata: the watch is metadata only): its deletion, a change of its spec (generation), labels or
// owners. Not its creation (winnet-controller made it, or its Node's next event applies over it) nor
// a status write (the route conflict reconciler's): the Node's reconcile would apply the unchanged
// route again, one request per route added for nothing, which at thousands of Nodes also kept
// winnet-controller writing after its queues had emptied (make bench-scale).
func routeChangedByOthers() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, cur := e.ObjectOld, e.ObjectNew
			if old == nil || cur == nil {
				return true
			}
			return old.GetGeneration() != cur.GetGeneration() || !maps.Equal(old.GetLabels(), cur.GetLabels()) ||
				!slices.EqualFunc(old.GetOwnerReferences(), cur.GetOwnerReferences(), func(a, b metav1.OwnerReference) bool { return a.UID == b.UID }) ||
				old.GetDeletionTimestamp().IsZero() != cur.GetDeletionTimestamp().IsZero()
		},
	}
}
