package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/egress"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Flows is the flow owner of the Egresses' flows (pipeline.CategoryEgress): after a restart the
// previous round of flows, the Egresses' included, stays until this reconciler has installed its
// complete set, so a selected Pod's traffic never falls back to the node's SNAT meanwhile.
const Flows nodenetwork.FlowOwner = "Egresses"

// notReadyRetry is how soon a pass looks again while the node network is not realised.
const notReadyRetry = 2 * time.Second

// pass is the only work item: the node's Egresses are converged as one desired set.
var pass = reconcile.Request{}

// Reconciler converges the node's share of the cluster's Egresses: the egress IPs assigned to the node
// on the bridge interface (never used as the host's source), the flows that SNAT the selected local
// Pods' connections to them, and the absence of every other Egress's IP from the bridge interface.
// It reports the egress IPs it realised through State (the WindowsNodeNetwork's status.egressIPs,
// from which winnet-controller sets each Egress's Ready).
type Reconciler struct {
	Client   client.Client
	NodeName string
	Net      hostnet.Links
	State    *nodenetwork.State

	// Remote, when set, holds the other nodes' Pods the Egresses this node holds select (their nodes
	// relay their connections here); nil: the node SNATs its local Pods only.
	Remote *RemotePods

	// ids are the EgressField ids of the Egresses held, by name; stable while an Egress is held.
	ids map[string]uint32
	// RecordFile, when set, keeps the egress IPs the agent put on the bridge interface across its
	// restarts (RecordFileName in its state directory).
	RecordFile string

	// added are the egress IPs on the bridge interface that this agent, or one before it (RecordFile),
	// put there and has not removed.
	added map[netip.Addr]bool
	// recorded is what RecordFile holds, as last written or read.
	recorded []netip.Addr
	// skipped are the selected Pods the last pass could not carry (desiredState.skipped): logged
	// when they change.
	skipped []netip.Addr

	// Fence, when set, says whether the node may hold egress IPs (its Egress Lease is confirmed):
	// while it may not, the node holds none, whatever the Egresses say.
	Fence *Fence
}

// loadAdded reads, at the first pass, the egress IPs earlier agents put on the bridge interface.
func (r *Reconciler) loadAdded() error {
	if r.added != nil {
		return nil
	}
	r.added = map[netip.Addr]bool{}
	if r.RecordFile == "" {
		return nil
	}
	ips, err := loadRecord(r.RecordFile)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		r.added[ip] = true
	}
	r.recorded = ips
	return nil
}

// record writes RecordFile when the set of added IPs changed.
func (r *Reconciler) record() error {
	if r.RecordFile == "" {
		return nil
	}
	ips := slices.SortedFunc(maps.Keys(r.added), netip.Addr.Compare)
	if slices.Equal(ips, r.recorded) {
		return nil
	}
	if err := saveRecord(r.RecordFile, ips); err != nil {
		return fmt.Errorf("recording the egress IPs: %w", err)
	}
	r.recorded = ips
	return nil
}

// SetupWithManager registers the reconciler: any change of an Egress, of one of the node's Pods (the
// manager's cache holds only those), of a remote Pod a held Egress selects (RemotePods), of a
// Namespace or of the node's labels, and any change of the realised node network or of the realised
// routes, queues one pass.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	r.State.AddFlowOwner(Flows)
	// The agent's counters are scraped while its manager runs (several agents run in the tests' process).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return collector.sources.While(ctx, r) })); err != nil {
		return fmt.Errorf("adding the Egress counters: %w", err)
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{pass} })
	wakes := []<-chan struct{}{r.State.Subscribe(), r.State.PeerChanges()}
	if r.Remote != nil {
		if err := mgr.Add(r.Remote); err != nil {
			return fmt.Errorf("adding the remote Pod watches: %w", err)
		}
		wakes = append(wakes, r.Remote.changes)
	}
	onRealized := nodenetwork.WakeSource(func(q nodenetwork.Queue) { q.Add(pass) }, func(q nodenetwork.Queue) { q.Add(pass) }, wakes...)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("egress").
		Watches(&networkv1alpha1.Egress{}, all).
		Watches(&corev1.Pod{}, all).
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(namespaceEvents(func() bool { return r.anyEgress(context.Background()) }))).
		// The node's labels, which an Egress's nodeSelector reads (whether the agent renews its
		// Lease); not its status, which kubelet writes every few seconds.
		Watches(&corev1.Node{}, all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(onRealized)
	if r.Fence != nil {
		b = b.WatchesRawSource(source.Channel(r.Fence.Changed(), all))
	}
	return b.Complete(r)
}

// namespaceEvents passes a Namespace's creation, deletion and label changes, and only while an
// Egress exists (anyEgress): a pass reads nothing else of a Namespace than its labels, and without an
// Egress they select nothing. Without it, every Namespace written anywhere in the cluster cost each
// agent a pass that read every Namespace (bench-scale, issue 64). An Egress created later brings
// its own pass, which reads the Namespaces then.
func namespaceEvents(anyEgress func() bool) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return anyEgress() },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) && anyEgress()
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return anyEgress() },
		GenericFunc: func(event.GenericEvent) bool { return anyEgress() },
	}
}

// anyEgress reports whether the cache holds an Egress (true on an error: the pass then decides).
func (r *Reconciler) anyEgress(ctx context.Context) bool {
	list := &networkv1alpha1.EgressList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return true
	}
	return len(list.Items) > 0
}

// Reconcile converges the node's Egresses.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	rz, ok := r.State.Realized()
	if !ok {
		return reconcile.Result{RequeueAfter: notReadyRetry}, nil
	}
	list := &networkv1alpha1.EgressList{}
	if err := r.Client.List(ctx, list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Egresses: %w", err)
	}
	// Without an Egress nothing is selected, relayed or held: the pass withdraws what it installed
	// (an empty desired state) without reading the Pods, every Namespace and every peer. Each route a
	// Node added brings a pass (PeerChanges), so in a cluster of thousands of Nodes with no Egress
	// those reads were a cost per Node added that grew with the cluster (bench-scale, issue 64).
	var pods []corev1.Pod
	var nsLabels map[string]labels.Set
	var peers []nodenetwork.Peer
	if len(list.Items) > 0 {
		podList := &corev1.PodList{}
		if err := r.Client.List(ctx, podList); err != nil {
			return reconcile.Result{}, fmt.Errorf("listing the node's Pods: %w", err)
		}
		pods = podList.Items
		// Read only (their labels): no copy of every Namespace per pass.
		namespaces := &corev1.NamespaceList{}
		if err := r.Client.List(ctx, namespaces, client.UnsafeDisableDeepCopy); err != nil {
			return reconcile.Result{}, fmt.Errorf("listing Namespaces: %w", err)
		}
		nsLabels = make(map[string]labels.Set, len(namespaces.Items))
		for i := range namespaces.Items {
			nsLabels[namespaces.Items[i].Name] = namespaces.Items[i].Labels
		}
		peers = r.State.Peers()
	}
	all := podsOf(pods, nsLabels, r.NodeName, false)
	if r.Remote != nil {
		r.Remote.set(ctx, r.remoteWatches(list.Items, nsLabels))
		all = append(all, podsOf(r.Remote.list(), nsLabels, r.NodeName, true)...)
	}
	if r.Fence != nil {
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, node); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading Node %s: %w", r.NodeName, err)
		}
		r.Fence.SetWanted(r.mayHoldAny(rz, list.Items, node.Labels))
	}
	d := r.desired(rz, list.Items, all, peers)
	if len(d.skipped) > 0 && !slices.Equal(d.skipped, r.skipped) {
		ctrl.LoggerFrom(ctx).Info("Selected Pods not carried to their Egress's holder: the route between the nodes is not realised",
			"pods", len(d.skipped), "first", d.skipped[0])
	}
	r.skipped = d.skipped
	recheck, wait := r.fence(ctx, &d)
	if wait {
		return reconcile.Result{RequeueAfter: fenceStartRetry}, nil
	}
	return reconcile.Result{RequeueAfter: recheck}, r.apply(ctx, rz, d)
}

// mayHoldAny reports whether the node may hold one of the Egresses: one is assigned to it, or one's
// IP lies on its uplink subnet and its nodeSelector selects it (egress.MayHold, the test
// winnet-controller assigns by, with the node taken as Ready and its Lease renewed). Only then does the
// agent renew its Egress Lease (Fence.SetWanted).
func (r *Reconciler) mayHoldAny(rz nodenetwork.Realized, items []networkv1alpha1.Egress, nodeLabels labels.Set) bool {
	self := egress.Node{Name: r.NodeName, Labels: nodeLabels, Ready: true, Subnet: rz.NodeSubnet}
	for i := range items {
		e := &items[i]
		if e.Status.Node == r.NodeName {
			return true
		}
		c, err := egress.Compile(e)
		if err != nil {
			continue
		}
		if ip, err := netip.ParseAddr(string(e.Spec.EgressIP)); err == nil && egress.MayHold(c, ip, self) {
			return true
		}
	}
	return false
}

// fenceStartRetry is how soon a pass looks again while the agent's first Lease renewal is under way.
const fenceStartRetry = 200 * time.Millisecond

// fence gives up every held Egress while the node's Lease is not confirmed (Fence), so that the
// IPs leave the bridge interface within the fencing bound of the last confirmed renewal, whatever the
// agent still reads of the Egresses (a cache cut off from the API server). It returns when the next
// pass must look again (the end of the confirmed period, while it holds an IP), or wait: no renewal
// has completed yet (a starting agent changes nothing until it knows).
func (r *Reconciler) fence(ctx context.Context, d *desiredState) (recheck time.Duration, wait bool) {
	if r.Fence == nil {
		return 0, false
	}
	now := r.Fence.now()
	tried, valid, until := r.Fence.State(now)
	switch {
	case !tried:
		return 0, true
	case valid:
		if len(d.held) == 0 {
			return 0, false
		}
		return until.Sub(now) + time.Millisecond, false
	}
	if len(d.held) > 0 {
		ips := make([]netip.Addr, 0, len(d.held))
		for _, e := range d.held {
			ips = append(ips, e.IP)
		}
		ctrl.LoggerFrom(ctx).Info("Giving up the egress IPs: the node's Egress Lease is not confirmed",
			"egressIPs", ips, "confirmedUntil", until)
		d.others = append(d.others, ips...)
		d.held = nil
	}
	return 0, false
}

// remoteWatches are the Pod watches of the Egresses assigned to this node: one per Egress and
// namespace its namespaceSelector selects, filtered by its podSelector.
func (r *Reconciler) remoteWatches(items []networkv1alpha1.Egress, nsLabels map[string]labels.Set) map[podWatch]bool {
	want := map[podWatch]bool{}
	for i := range items {
		e := &items[i]
		if e.Status.Node != r.NodeName || !meta.IsStatusConditionTrue(e.Status.Conditions, networkv1alpha1.AssignedCondition) {
			continue
		}
		c, err := egress.Compile(e)
		if err != nil {
			continue
		}
		for ns, l := range nsLabels {
			if c.Namespaces.Matches(l) {
				want[podWatch{namespace: ns, selector: c.Pods.String()}] = true
			}
		}
	}
	return want
}

// pod is what the desired state needs of a Pod.
type pod struct {
	ip                    netip.Addr
	labels, namespaceLabs labels.Set
	// remote: the Pod runs on another node.
	remote bool
}

// podsOf are the running Pods on the Pod network with an IPv4 address among items: those of node,
// or with remote those of every other node.
func podsOf(items []corev1.Pod, nsLabels map[string]labels.Set, node string, remote bool) []pod {
	var out []pod
	for i := range items {
		p := &items[i]
		if p.Spec.NodeName == "" || (p.Spec.NodeName != node) != remote || p.Spec.HostNetwork || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ns, ok := nsLabels[p.Namespace]
		if !ok {
			continue
		}
		for _, a := range p.Status.PodIPs {
			if ip, err := netip.ParseAddr(a.IP); err == nil && ip.Is4() {
				out = append(out, pod{ip: ip, labels: p.Labels, namespaceLabs: ns, remote: remote})
			}
		}
	}
	return out
}

// desiredState is the node's share of the Egresses.
type desiredState struct {
	// held are the Egresses the node holds, with their selected local and remote Pods.
	held []pipeline.Egress
	// relays are the Egresses other nodes hold, with the selected local Pods relayed to them.
	relays []pipeline.EgressRelay
	// others are the egress IPs of Egresses the node does not hold: not on its bridge interface.
	others []netip.Addr
	// skipped are the selected Pods (addresses) neither SNATed here nor relayed: the route between
	// the Pod's node and the holder is not realised on this node. They keep their node's SNAT.
	skipped []netip.Addr
}

// desired computes the node's share: the Egresses assigned to it (status.node, Assigned) whose IP
// lies on its uplink subnet, each with the local and remote Pods it applies to (the oldest Egress
// selecting a Pod applies, assigned or not: egress.Applies, as winnet-controller's Superseded says),
// and the Egresses assigned to other nodes and Ready there with the local Pods they apply to, relayed
// to their holder.
// A remote Pod is SNATed here only when the route to its node is realised (a peer's Pod CIDR holds
// its address); a local Pod is relayed only when the route to the holder is.
func (r *Reconciler) desired(rz nodenetwork.Realized, items []networkv1alpha1.Egress, pods []pod, peers []nodenetwork.Peer) desiredState {
	var compiled []egress.Compiled
	for i := range items {
		if c, err := egress.Compile(&items[i]); err == nil {
			compiled = append(compiled, c)
		}
	}
	var d desiredState
	// byName indexes d.held (indexes: appending moves the elements).
	byName := map[string]int{}
	keep := map[string]bool{}
	// relayTo are the holders of the Egresses assigned to other nodes, by Egress name.
	relayTo := map[string]string{}
	if r.ids == nil {
		r.ids = map[string]uint32{}
	}
	for _, c := range compiled {
		e := c.Egress
		ip, err := netip.ParseAddr(string(e.Spec.EgressIP))
		if err != nil || !ip.Is4() || ip == rz.Node.NodeIP {
			continue
		}
		assigned := meta.IsStatusConditionTrue(e.Status.Conditions, networkv1alpha1.AssignedCondition)
		if e.Status.Node != r.NodeName || !assigned || !rz.NodeSubnet.Masked().Contains(ip) {
			d.others = append(d.others, ip)
			// Relayed once the holder has realised it (Ready: the IP on its bridge interface, its flows,
			// the remote Pods it had listed then, installed): before, the holder would drop the relayed
			// packets, and the Pods keep their node's SNAT as the holder's own do until then.
			if assigned && e.Status.Node != "" && e.Status.Node != r.NodeName &&
				meta.IsStatusConditionTrue(e.Status.Conditions, networkv1alpha1.ReadyCondition) {
				relayTo[e.Name] = e.Status.Node
			}
			continue
		}
		keep[e.Name] = true
		byName[e.Name] = len(d.held)
		d.held = append(d.held, pipeline.Egress{IP: ip})
	}
	// Ids: kept while held, the lowest free one for a new Egress.
	for name := range r.ids {
		if !keep[name] {
			delete(r.ids, name)
		}
	}
	used := map[uint32]bool{}
	for _, id := range r.ids {
		used[id] = true
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		id, ok := r.ids[name]
		for next := uint32(1); !ok; next++ {
			if !used[next] {
				id, ok = next, true
				used[id], r.ids[name] = true, id
			}
		}
		d.held[byName[name]].ID = id
	}
	relays := map[string]int{} // indexes of d.relays by holder
	for _, p := range pods {
		applies, ok := egress.Applies(compiled, p.labels, p.namespaceLabs)
		if !ok {
			continue
		}
		if i, held := byName[applies.Egress.Name]; held {
			if !p.remote {
				d.held[i].Pods = append(d.held[i].Pods, p.ip)
			} else if peer, ok := peerOf(peers, func(q nodenetwork.Peer) bool { return q.Route.CIDR.Contains(p.ip) }); ok {
				d.held[i].RemotePods = append(d.held[i].RemotePods, pipeline.RemotePod{IP: p.ip, Node: peer.Route})
			} else {
				d.skipped = append(d.skipped, p.ip)
			}
			continue
		}
		holder, elsewhere := relayTo[applies.Egress.Name]
		if !elsewhere || p.remote {
			continue
		}
		peer, ok := peerOf(peers, func(q nodenetwork.Peer) bool { return q.NodeName == holder })
		if !ok {
			d.skipped = append(d.skipped, p.ip)
			continue
		}
		i, ok := relays[holder]
		if !ok {
			i = len(d.relays)
			relays[holder] = i
			d.relays = append(d.relays, pipeline.EgressRelay{Holder: peer.Route})
		}
		d.relays[i].Pods = append(d.relays[i].Pods, p.ip)
	}
	slices.SortFunc(d.skipped, netip.Addr.Compare)
	return d
}

// peerOf returns the first realised route that match keeps.
func peerOf(peers []nodenetwork.Peer, match func(nodenetwork.Peer) bool) (nodenetwork.Peer, bool) {
	i := slices.IndexFunc(peers, match)
	if i < 0 {
		return nodenetwork.Peer{}, false
	}
	return peers[i], true
}

// apply puts the held egress IPs on the bridge interface, installs the flows, then removes the
// egress IPs the node no longer holds, and reports what it realised.
func (r *Reconciler) apply(ctx context.Context, rz nodenetwork.Realized, d desiredState) error {
	log := ctrl.LoggerFrom(ctx)
	if err := r.loadAdded(); err != nil {
		// Not fatal: the IPs of the unreadable record stay where they are; this agent's are recorded anew.
		log.Error(err, "Cannot read the egress IPs an earlier agent put on the bridge interface; they are left there")
	}
	heldIPs := make([]netip.Addr, 0, len(d.held))
	for _, e := range d.held {
		heldIPs = append(heldIPs, e.IP)
	}
	r.State.SetEgressAddresses(append(slices.Collect(maps.Keys(r.added)), heldIPs...))
	var errs []error
	var realised []netip.Addr
	var installed []pipeline.Egress
	for _, e := range d.held {
		if !r.added[e.IP] {
			log.Info("Taking egress IP", "egressIP", e.IP, "bridgeLink", rz.BridgeLinkIndex)
		}
		// Recorded before it is added: an agent that stops in between finds it in the record.
		r.added[e.IP] = true
		if err := r.record(); err != nil {
			delete(r.added, e.IP)
			errs = append(errs, err)
			continue
		}
		if err := r.Net.EnsureSkipAsSourceAddress(ctx, rz.BridgeLinkIndex, netip.PrefixFrom(e.IP, 32)); err != nil {
			errs = append(errs, fmt.Errorf("putting egress IP %s on the bridge interface: %w", e.IP, err))
			continue
		}
		installed = append(installed, e)
	}
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryEgress, rz.Node.EgressFlows(installed, d.relays))
	if synced.Mods() > 0 {
		log.Info("Synced Egress flows", "egresses", len(installed), "added", synced.Added, "modified", synced.Modified, "deleted", synced.Deleted)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("installing the Egresses' flows: %w", err))
		r.State.SetEgressIPs(nil)
		return errors.Join(errs...)
	}
	r.State.FlowsSynced(ctx, Flows, rz.Flows)
	r.State.SetHeldEgresses(heldEgresses(r.ids, installed))
	for _, e := range installed {
		realised = append(realised, e.IP)
	}
	// Off the bridge: what this agent added and no longer holds, and any other Egress's IP (left by
	// an agent before a restart). Never the node IP, never an address with another prefix length.
	remove := slices.Collect(maps.Keys(r.added))
	remove = append(remove, d.others...)
	present, err := r.Net.Addresses(ctx, rz.BridgeLinkIndex)
	if err != nil {
		errs = append(errs, fmt.Errorf("reading the bridge interface's addresses: %w", err))
	}
	for _, ip := range remove {
		if slices.Contains(heldIPs, ip) || ip == rz.Node.NodeIP {
			continue
		}
		host := netip.PrefixFrom(ip, 32)
		if slices.Contains(present, host) {
			log.Info("Releasing egress IP", "egressIP", ip)
			if err := r.Net.DeleteAddress(ctx, rz.BridgeLinkIndex, host); err != nil {
				errs = append(errs, fmt.Errorf("removing egress IP %s from the bridge interface: %w", ip, err))
				continue
			}
		}
		delete(r.added, ip)
	}
	if err := r.record(); err != nil {
		errs = append(errs, err)
	}
	r.State.SetEgressAddresses(append(slices.Collect(maps.Keys(r.added)), heldIPs...))
	r.State.SetEgressIPs(realised)
	return errors.Join(errs...)
}
