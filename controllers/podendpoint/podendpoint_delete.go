package podendpoint

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// tearDown detaches an attachment whose Pod is gone, releasing its address.
func (r *Reconciler) tearDown(ctx context.Context, pod *corev1.Pod, pep *networkv1alpha1.PodEndpoint, a *Attachment) error {
	p := r.Pods
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(a.SandboxID)()
	cur, ok := p.Store().Get(a.SandboxID)
	if !ok {
		return nil // DEL came meanwhile
	}
	ctrl.LoggerFrom(ctx).Info("Tearing down the network of a Pod that is gone", "sandbox", a.SandboxID, "ip", a.IP)
	if err := p.detach(ctx, cur); err != nil {
		return fmt.Errorf("tearing down sandbox %s of Pod %s: %w", a.SandboxID, a.Pod(), err)
	}
	if regarding := eventObject(pod, pep); regarding != nil {
		r.Recorder.Eventf(regarding, nil, corev1.EventTypeNormal, networkv1alpha1.PodGoneReason, "TearDown",
			"Pod is gone: removed endpoint %s and released %s", a.EndpointName, a.IP)
	}
	return nil
}

// eventObject is what an event about a Pod's attachment is recorded on: the Pod, else its
// PodEndpoint, else nothing.
func eventObject(pod *corev1.Pod, pep *networkv1alpha1.PodEndpoint) runtime.Object {
	switch {
	case pod != nil:
		return pod
	case pep != nil:
		return pep
	}
	return nil
}

// deletePodEndpoint removes a PodEndpoint whose attachment is gone: the finalizer first (there is
// nothing left to tear down), then the object.
func (r *Reconciler) deletePodEndpoint(ctx context.Context, pep *networkv1alpha1.PodEndpoint) error {
	if controllerutil.ContainsFinalizer(pep, Finalizer) {
		before := pep.DeepCopy()
		controllerutil.RemoveFinalizer(pep, Finalizer)
		if err := r.Client.Patch(ctx, pep, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the finalizer of PodEndpoint %s: %w", client.ObjectKeyFromObject(pep), err)
		}
	}
	if !pep.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.Client.Delete(ctx, pep); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting PodEndpoint %s: %w", client.ObjectKeyFromObject(pep), err)
	}
	return nil
}
