package agent

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
)

// NetworkPolicyOptions configure the agent's NetworkPolicy reconciler.
type NetworkPolicyOptions struct {
	NodeName string
	State    *nodenetwork.State
	// Local lists the Pods attached on the node (the Pod network's store).
	Local networkpolicy.Attachments
	// Pods, when set, is the Pod network whose new Pods' ports wait for their NetworkPolicy
	// flows (podendpoint.PolicyGate).
	Pods *podendpoint.Pods
	// ResyncPeriod is the drift check period; zero means the default.
	ResyncPeriod time.Duration
}

// SetupNetworkPolicy registers the NetworkPolicy reconciler with the manager, with a cache of its
// own for the Pods of every node (policy peers are matched by the Pods' addresses; the manager's
// cache holds only the node's Pods), trimmed to what policy reads.
func SetupNetworkPolicy(mgr ctrl.Manager, opts NetworkPolicyOptions) error {
	pods, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: trimPod}},
	})
	if err != nil {
		return fmt.Errorf("creating the cache of every node's Pods: %w", err)
	}
	if err := mgr.Add(pods); err != nil {
		return fmt.Errorf("adding the cache of every node's Pods: %w", err)
	}
	r := &networkpolicy.Reconciler{
		Client: mgr.GetClient(), Pods: pods, PodSource: pods, APIReader: mgr.GetAPIReader(), Local: opts.Local,
		Recorder: mgr.GetEventRecorder("winnet-agent"), NodeName: opts.NodeName, State: opts.State, ResyncPeriod: opts.ResyncPeriod,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if opts.Pods != nil {
		opts.Pods.SetPolicyGate(r)
	}
	return nil
}

// trimPod keeps of a Pod what NetworkPolicy reads: name, namespace, labels, host networking, the
// containers' ports, phase and addresses.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	t := &corev1.Pod{}
	t.Name, t.Namespace, t.UID, t.Labels, t.ResourceVersion = p.Name, p.Namespace, p.UID, p.Labels, p.ResourceVersion
	t.Spec.HostNetwork, t.Spec.NodeName = p.Spec.HostNetwork, p.Spec.NodeName
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			t.Spec.Containers = append(t.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	t.Status.Phase, t.Status.PodIPs = p.Status.Phase, p.Status.PodIPs
	return t, nil
}
