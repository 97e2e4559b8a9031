package egress

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// Selector converts an Egress's label selector to a labels.Selector; nil selects everything, like
// an empty selector.
func Selector(s *networkv1alpha1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	ls := &metav1.LabelSelector{MatchLabels: make(map[string]string, len(s.MatchLabels))}
	for k, v := range s.MatchLabels {
		ls.MatchLabels[k] = string(v)
	}
	for _, e := range s.MatchExpressions {
		r := metav1.LabelSelectorRequirement{Key: e.Key, Operator: metav1.LabelSelectorOperator(e.Operator)}
		for _, v := range e.Values {
			r.Values = append(r.Values, string(v))
		}
		ls.MatchExpressions = append(ls.MatchExpressions, r)
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("converting the selector: %w", err)
	}
	return sel, nil
}

// Compiled is an Egress with its selectors converted, as Applies and Assign read it.
type Compiled struct {
	Egress     *networkv1alpha1.Egress
	Pods       labels.Selector
	Namespaces labels.Selector
	Nodes      labels.Selector
}

// Compile converts the selectors of an Egress. The API server checks them, so an error means an
// object written before the checks or by another client; the caller reports it.
func Compile(e *networkv1alpha1.Egress) (Compiled, error) {
	c := Compiled{Egress: e}
	var err error
	if c.Pods, err = Selector(&e.Spec.PodSelector); err != nil {
		return Compiled{}, fmt.Errorf("podSelector: %w", err)
	}
	if c.Namespaces, err = Selector(&e.Spec.NamespaceSelector); err != nil {
		return Compiled{}, fmt.Errorf("namespaceSelector: %w", err)
	}
	if c.Nodes, err = Selector(e.Spec.NodeSelector); err != nil {
		return Compiled{}, fmt.Errorf("nodeSelector: %w", err)
	}
	return c, nil
}

// Selects reports whether the Egress selects a Pod with these labels in a namespace with these
// labels.
func (c Compiled) Selects(podLabels, namespaceLabels labels.Set) bool {
	return c.Namespaces.Matches(namespaceLabels) && c.Pods.Matches(podLabels)
}

// Older orders Egresses by age: the older first (creationTimestamp, then name). Of the Egresses
// that select a Pod the oldest applies; of Egresses with the same egressIP the oldest keeps it.
func Older(a, b *networkv1alpha1.Egress) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.Name < b.Name
}

// Applies returns the Egress that applies to a Pod among those given (in any order): the oldest
// that selects it; false when none does.
func Applies(egresses []Compiled, podLabels, namespaceLabels labels.Set) (Compiled, bool) {
	var best Compiled
	found := false
	for _, c := range egresses {
		if !c.Selects(podLabels, namespaceLabels) {
			continue
		}
		if !found || Older(c.Egress, best.Egress) {
			best, found = c, true
		}
	}
	return best, found
}
