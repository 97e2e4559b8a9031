package podendpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/cni/ipam"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/keyed"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// DefaultNotReadyWait bounds how long ADD waits for the node network to become Ready before it
// answers "try again later".
const DefaultNotReadyWait = 5 * time.Second

// portTimeout bounds waiting for OVS to give a new port its OpenFlow port number.
const portTimeout = 10 * time.Second

// cleanupTimeout bounds a rollback or teardown that runs after the request's context ended.
const cleanupTimeout = 30 * time.Second

// Host is the host plumbing Pods are attached with.
type Host struct {
	HNS   hns.Interface
	OVSDB ovsdb.Interface
	Net   HostNet
	IPAM  *ipam.HostLocal
}

// HostNet is the host plumbing a Pod's attachment needs: its vNIC's link (found by name, its MTU
// set), made a port of the virtual switch only, and a watch of links for vNICs that appear.
type HostNet interface {
	hostnet.Links
	hostnet.SwitchPorts
	hostnet.Watches
}

// Options configure Pods.
type Options struct {
	// Reader reads the node's WindowsNodeNetwork, from the manager's cache: the CNI path never
	// waits for the API server.
	Reader   client.Reader
	NodeName string
	Host     Host
	State    *nodenetwork.State
	Store    *Store
	// Incarnations gives each attachment its incarnation (incarnation.go); nil gives none (no
	// connection is checked).
	Incarnations *Incarnations
	// NotReadyWait bounds how long ADD waits for the node network; zero means DefaultNotReadyWait.
	NotReadyWait time.Duration
	// VNICTimeout bounds how long the agent waits for a Pod's vNIC after ADD; zero means
	// DefaultVNICTimeout.
	VNICTimeout time.Duration
	// PolicyTimeout is how long a new Pod's port waits for its NetworkPolicy flows before its
	// PodEndpoint says so (it goes on waiting, unbound); zero means DefaultPolicyTimeout.
	PolicyTimeout time.Duration
	// HostPorts holds the node's hostPort claims, which the Service reconciler realises; nil
	// serves no hostPort (portMappings are checked and ignored). HostPortRecords keeps each
	// sandbox's mappings for the next agent.
	HostPorts       *hostport.Registry
	HostPortRecords hostport.Records
}

// PolicyGate tells when the NetworkPolicy flows of a new local Pod are in the switch
// (networkpolicy.Reconciler): WaitPolicies returns once a pass that compiled the policies of the
// Pod, attached at ofport, has committed its flows, or with ctx's error.
type PolicyGate interface {
	WaitPolicies(ctx context.Context, pod types.NamespacedName, ofport int32) error
}

// DefaultPolicyTimeout bounds how long a new Pod's port waits for its NetworkPolicy flows before
// its PodEndpoint reports PoliciesPending.
const DefaultPolicyTimeout = 10 * time.Second

// Pods attaches Pod sandboxes to the node network and detaches them, driving the steps of
// lifecycle.go. The CNI handler and the PodEndpoint reconciler share it: every change to one sandbox
// holds that sandbox's lock, and a sweep for orphans (start-up, GC) excludes all of them.
type Pods struct {
	opts  Options
	locks keyed.Mutex
	// sweep is held for reading by every attach, detach and repair, and for writing by sweeps,
	// which must not mistake an attachment being made for an orphan.
	sweep sync.RWMutex
	// flowMu guards ofportOwner. The agent chooses the ofport of each Pod's port (so that the
	// Pod's flows are installed while OVS attaches the port) and a number is reused once its port
	// is gone: removing one Pod's flows must not remove its successor's. ofportLocks orders the
	// flow changes of one ofport; changes of different ofports go to the switch at once.
	flowMu      sync.Mutex
	ofportOwner map[int32]string
	ofportLocks keyed.Mutex
	// changed wakes the PodEndpoint reconciler for a Pod.
	changedMu sync.Mutex
	changed   func(types.NamespacedName)
	// network caches the HNS network's ID for as long as the node network is realised the same
	// way: every HNS call waits its turn on the host.
	networkMu sync.Mutex
	network   cachedNetwork
	// verified records when each attachment was last made or repaired.
	verifiedMu sync.Mutex
	verified   map[string]verification
	// vnicWaiters cancel the waiters of the vNICs that have not appeared yet, by sandbox; baseCtx
	// is their parent.
	vnicMu      sync.Mutex
	vnicWaiters map[string]context.CancelFunc
	baseCtx     context.Context
	// links wakes the vNIC waiters when the host's links change.
	links linkWatch
	// gate is the NetworkPolicy gate new Pods' ports wait for (SetPolicyGate); nil: none.
	gateMu sync.Mutex
	gate   PolicyGate
}

// SetPolicyGate makes every new Pod's port wait for the gate before it is bound (vnic.go): an
// agent that realises NetworkPolicy sets it before the manager starts.
func (p *Pods) SetPolicyGate(g PolicyGate) {
	p.gateMu.Lock()
	defer p.gateMu.Unlock()
	p.gate = g
}

func (p *Pods) policyGate() PolicyGate {
	p.gateMu.Lock()
	defer p.gateMu.Unlock()
	return p.gate
}

// verification is when an attachment was last made or repaired, and on which bridge connection.
type verification struct {
	at    time.Time
	flows *openflow.Bridge
}

// markVerified records that the sandbox's attachment was just made or repaired.
func (p *Pods) markVerified(sandbox string, flows *openflow.Bridge) {
	p.verifiedMu.Lock()
	defer p.verifiedMu.Unlock()
	p.verified[sandbox] = verification{at: time.Now(), flows: flows}
}

// recentlyVerified reports whether the attachment was made or repaired within the last period on
// the current bridge connection, so that a reconcile right after ADD need not check it again.
func (p *Pods) recentlyVerified(sandbox string, flows *openflow.Bridge, period time.Duration) bool {
	p.verifiedMu.Lock()
	defer p.verifiedMu.Unlock()
	v, ok := p.verified[sandbox]
	return ok && v.flows == flows && time.Since(v.at) < period
}

func (p *Pods) forgetVerified(sandbox string) {
	p.verifiedMu.Lock()
	defer p.verifiedMu.Unlock()
	delete(p.verified, sandbox)
}

// cachedNetwork is the HNS network found for a realised node network.
type cachedNetwork struct {
	name  string
	flows *openflow.Bridge
	id    string
}

// NewPods returns Pods for the attachments already in opts.Store.
func NewPods(opts Options) *Pods {
	if opts.NotReadyWait <= 0 {
		opts.NotReadyWait = DefaultNotReadyWait
	}
	if opts.VNICTimeout <= 0 {
		opts.VNICTimeout = DefaultVNICTimeout
	}
	if opts.PolicyTimeout <= 0 {
		opts.PolicyTimeout = DefaultPolicyTimeout
	}
	p := &Pods{opts: opts, ofportOwner: map[int32]string{}, verified: map[string]verification{},
		vnicWaiters: map[string]context.CancelFunc{}, baseCtx: context.Background()}
	for _, a := range opts.Store.List() {
		if a.OFPort > 0 {
			p.ofportOwner[a.OFPort] = a.SandboxID
		}
	}
	p.restoreHostPorts()
	return p
}

// Store returns the attachments.
func (p *Pods) Store() *Store { return p.opts.Store }

// notify wakes the PodEndpoint reconciler for the Pod.
func (p *Pods) notify(pod types.NamespacedName) {
	p.changedMu.Lock()
	f := p.changed
	p.changedMu.Unlock()
	if f != nil {
		f(pod)
	}
}

func (p *Pods) onChange(f func(types.NamespacedName)) {
	p.changedMu.Lock()
	defer p.changedMu.Unlock()
	p.changed = f
}

// node is what attaching a Pod needs of the node network.
type node struct {
	realized  nodenetwork.Realized
	bridge    string
	networkID string
	mtu       int
	// tunnelPort is the node's configured tunnel UDP port (0: the type's default), which no
	// hostPort may take.
	tunnelPort uint16
}

// errNodeNotReady is wrapped when the node network is not Ready.
var errNodeNotReady = errors.New("the node network is not Ready")

// node returns the node network as it is now realised.
func (p *Pods) node(ctx context.Context) (node, error) {
	rz, ok := p.opts.State.Realized()
	if !ok {
		return node{}, errNodeNotReady
	}
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := p.opts.Reader.Get(ctx, client.ObjectKey{Name: p.opts.NodeName}, wnn); err != nil {
		return node{}, fmt.Errorf("%w: reading WindowsNodeNetwork %s: %w", errNodeNotReady, p.opts.NodeName, err)
	}
	if wnn.Status.MTU == 0 {
		return node{}, fmt.Errorf("%w: WindowsNodeNetwork %s reports no MTU yet", errNodeNotReady, p.opts.NodeName)
	}
	networkID, err := p.networkID(ctx, wnn.Spec.HNSNetwork.Name, rz.Flows)
	if err != nil {
		return node{}, fmt.Errorf("%w: looking up HNS network %s: %w", errNodeNotReady, wnn.Spec.HNSNetwork.Name, err)
	}
	return node{realized: rz, bridge: string(wnn.Spec.Bridge.Name), networkID: networkID, mtu: int(wnn.Status.MTU),
		tunnelPort: uint16(wnn.Spec.Encapsulation.Port)}, nil
}

// networkID returns the ID of the HNS network, looked up again when the node network was realised
// anew (a rebuilt network has a new ID and a new bridge connection).
func (p *Pods) networkID(ctx context.Context, name string, flows *openflow.Bridge) (string, error) {
	p.networkMu.Lock()
	defer p.networkMu.Unlock()
	if c := p.network; c.name == name && c.flows == flows && c.id != "" {
		return c.id, nil
	}
	network, err := p.opts.Host.HNS.GetNetworkByName(ctx, name)
	if err != nil {
		return "", err
	}
	p.network = cachedNetwork{name: name, flows: flows, id: network.ID}
	return network.ID, nil
}

// forgetNetwork drops the cached network ID, which HNS no longer knows.
func (p *Pods) forgetNetwork() {
	p.networkMu.Lock()
	defer p.networkMu.Unlock()
	p.network = cachedNetwork{}
}

// waitNode waits, within NotReadyWait, for the node network to be Ready.
func (p *Pods) waitNode(ctx context.Context) (node, error) {
	deadline := time.Now().Add(p.opts.NotReadyWait)
	for {
		n, err := p.node(ctx)
		if err == nil {
			return n, nil
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return node{}, cnitypes.NewError(cnitypes.ErrTryAgainLater,
				fmt.Sprintf("the network of node %s is not ready yet; try again later", p.opts.NodeName), err.Error())
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The helpers the steps of a Pod's attachment call (lifecycle.go).

// attachPod attaches the endpoint to the Pod's network namespace.
func (p *Pods) attachPod(ctx context.Context, ep *hns.Endpoint, a *Attachment) error {
	if err := p.opts.Host.HNS.AttachEndpoint(ctx, ep.ID, a.Netns); err != nil {
		if errors.Is(err, hns.ErrNotFound) {
			return cnitypes.NewError(cnitypes.ErrInvalidNetNS, fmt.Sprintf("network namespace %q (CNI_NETNS) does not exist", a.Netns), err.Error())
		}
		return fmt.Errorf("attaching HNS endpoint %s to %s: %w", a.EndpointName, a.Netns, err)
	}
	return nil
}

// createEndpoint creates the sandbox's HNS endpoint. If that fails and an endpoint of the same name
// exists that no attachment records — the remains of an ADD the agent did not finish — it is
// deleted and the creation tried once more (the caller holds the sandbox's lock). A network HNS no
// longer knows is looked up again on the next call.
func (p *Pods) createEndpoint(ctx context.Context, spec hns.EndpointSpec) (*hns.Endpoint, error) {
	ep, err := p.opts.Host.HNS.CreateEndpoint(ctx, spec)
	if errors.Is(err, hns.ErrNotFound) {
		p.forgetNetwork()
	}
	if err != nil && !errors.Is(err, hns.ErrNotFound) {
		if stale, serr := p.deleteStaleEndpoint(ctx, spec.Name); serr != nil {
			err = errors.Join(err, serr)
		} else if stale {
			ep, err = p.opts.Host.HNS.CreateEndpoint(ctx, spec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("creating HNS endpoint %s: %w", spec.Name, err)
	}
	return ep, nil
}

// deleteStaleEndpoint deletes an endpoint of this name that no attachment records and reports
// whether there was one.
func (p *Pods) deleteStaleEndpoint(ctx context.Context, name string) (bool, error) {
	ep, err := p.opts.Host.HNS.GetEndpointByName(ctx, name)
	if errors.Is(err, hns.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up HNS endpoint %s: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleting a stale HNS endpoint left by an unfinished ADD", "endpoint", name, "endpointID", ep.ID)
	if err := setSwitchPort(ctx, p.opts.Host.Net, name, false); err != nil {
		return false, err
	}
	return true, p.opts.Host.HNS.DeleteEndpoint(ctx, ep.ID)
}

// moveFlows moves the attachment's flows to the ofport OVS gave its port.
func (p *Pods) moveFlows(ctx context.Context, n node, a *Attachment, ofport int32) error {
	ctrl.LoggerFrom(ctx).Info("OVS gave the Pod's port another ofport than requested", "port", a.EndpointName, "requested", a.OFPort, "ofPort", ofport)
	if err := p.removeFlows(ctx, a.OFPort, a.SandboxID); err != nil {
		return err
	}
	p.releaseOFPort(a.OFPort, a.SandboxID)
	a.OFPort = ofport
	_, err := p.installFlows(ctx, n.realized, a)
	return err
}

// ensurePort makes the endpoint's port exist, bound and attached by OVS, for a repair of an
// attachment whose vNIC exists: it reports whether the port had to be created or fixed and records
// the ofport OVS gave.
func (p *Pods) ensurePort(ctx context.Context, a *Attachment) (bool, error) {
	changed, err := p.createPort(ctx, a, true)
	if err != nil {
		return false, err
	}
	ofport, err := p.waitPort(ctx, a)
	if err != nil {
		return false, err
	}
	a.OFPort = ofport
	return changed, nil
}

// createPort makes the OVS port of the endpoint's name exist, requesting the attachment's ofport:
// unbound before the endpoint's vNIC exists, bound once it does, when the vNIC becomes a switch
// port meanwhile; a bound port is returned once ovs-vswitchd applied it. It reports whether the
// port had to be created or changed.
func (p *Pods) createPort(ctx context.Context, a *Attachment, bound bool) (changed bool, err error) {
	typ := podPortTypeUnbound
	marked := make(chan error, 1)
	if bound {
		typ = podPortType
		go func() { marked <- setSwitchPort(ctx, p.opts.Host.Net, a.EndpointName, true) }()
	} else {
		marked <- nil // no vNIC yet
	}
	spec := ovsdb.PortSpec{Name: a.EndpointName, Type: typ, OFPortRequest: a.OFPort, ExternalIDs: map[string]string{
		"winnet-pod":     a.PodNamespace + "/" + a.PodName,
		"winnet-sandbox": a.SandboxID,
		// Binding changes the row (as the type does on Windows), so that OVS opens the vNIC now.
		"winnet-vnic": strconv.FormatBool(bound),
	}}
	ensure := p.opts.Host.OVSDB.EnsurePort
	if bound {
		// OVS tried to open the interface of an unbound port and recorded the failure: the
		// write that binds it makes ovs-vswitchd try again, and the ofport or error is the one of
		// that pass once it reports the write applied.
		ensure = p.opts.Host.OVSDB.EnsurePortApplied
	}
	changed, err = ensure(ctx, a.Bridge, spec)
	if merr := <-marked; merr != nil {
		return changed, fmt.Errorf("making %s a switch port: %w", a.EndpointName, merr)
	}
	if err != nil {
		return changed, fmt.Errorf("creating OVS port %s: %w", a.EndpointName, err)
	}
	return changed, nil
}

// waitPort waits for OVS to attach the port and returns its ofport.
func (p *Pods) waitPort(ctx context.Context, a *Attachment) (int32, error) {
	wctx, cancel := context.WithTimeout(ctx, portTimeout)
	defer cancel()
	ofport, err := p.opts.Host.OVSDB.WaitOFPort(wctx, a.EndpointName)
	if err != nil {
		return 0, fmt.Errorf("waiting for OVS to attach port %s: %w", a.EndpointName, err)
	}
	return ofport, nil
}

// claimOFPort reserves the lowest ofport no Pod uses for the sandbox's port.
func (p *Pods) claimOFPort(sandbox string) int32 {
	p.flowMu.Lock()
	defer p.flowMu.Unlock()
	for n := int32(1); ; n++ {
		if _, taken := p.ofportOwner[n]; !taken {
			p.ofportOwner[n] = sandbox
			return n
		}
	}
}

// releaseOFPort gives the ofport back once the sandbox's port is gone.
func (p *Pods) releaseOFPort(ofport int32, sandbox string) {
	p.flowMu.Lock()
	defer p.flowMu.Unlock()
	if p.ofportOwner[ofport] == sandbox {
		delete(p.ofportOwner, ofport)
	}
}

// deletePort deletes the OVS port and gives the host interface back to the host.
func (p *Pods) deletePort(ctx context.Context, a *Attachment) error {
	if _, err := p.opts.Host.OVSDB.DeletePort(ctx, a.Bridge, a.EndpointName); err != nil {
		return fmt.Errorf("deleting OVS port %s: %w", a.EndpointName, err)
	}
	if err := setSwitchPort(ctx, p.opts.Host.Net, a.EndpointName, false); err != nil {
		return fmt.Errorf("giving %s back to the host: %w", a.EndpointName, err)
	}
	return nil
}

// podFlows are the flows of the attachment, their cookie object its ofport. While the port waits
// for its vNIC in an agent whose new Pods wait for their NetworkPolicy flows (PolicyGate), they
// also refuse every packet to the Pod (pipeline.PodPolicyPendingFlows): such a packet would
// otherwise pass the policy tables, which do not isolate the Pod yet, and be committed to
// conntrack before its output to the unbound port fails, and the later packets of its connection,
// once the port is bound, would pass as established.
func (p *Pods) podFlows(rz nodenetwork.Realized, a *Attachment) ([]openflow.Flow, error) {
	mac, err := net.ParseMAC(a.MAC)
	if err != nil {
		return nil, fmt.Errorf("MAC of endpoint %s: %w", a.EndpointName, err)
	}
	pod := pipeline.Pod{OFPort: uint32(a.OFPort), MAC: mac, IP: a.IP.Addr(), Incarnation: p.opts.Incarnations.Of(a.SandboxID)}
	flows := rz.Node.PodFlows(pod)
	if a.WaitingForVNIC && p.policyGate() != nil {
		flows = append(flows, rz.Node.PodPolicyPendingFlows(pod)...)
	}
	for i := range flows {
		flows[i].Cookie = uint64(a.OFPort)
	}
	return flows, nil
}

// installFlows installs the attachment's flows where they are missing, taking its ofport over from
// any earlier owner.
func (p *Pods) installFlows(ctx context.Context, rz nodenetwork.Realized, a *Attachment) (openflow.SyncResult, error) {
	flows, err := p.podFlows(rz, a)
	if err != nil {
		return openflow.SyncResult{}, err
	}
	defer p.ofportLocks.Lock(strconv.Itoa(int(a.OFPort)))()
	p.flowMu.Lock()
	p.ofportOwner[a.OFPort] = a.SandboxID
	p.flowMu.Unlock()
	res, err := rz.Flows.SyncObject(ctx, pipeline.CategoryPod, uint64(a.OFPort), flows)
	if err != nil {
		return res, fmt.Errorf("installing the flows of port %s: %w", a.EndpointName, err)
	}
	return res, nil
}

// removeFlows removes the flows of ofport unless another sandbox owns it.
func (p *Pods) removeFlows(ctx context.Context, ofport int32, sandbox string) error {
	rz, ok := p.opts.State.Realized()
	if !ok || ofport <= 0 {
		return nil // no bridge connection: its flows go with it
	}
	defer p.ofportLocks.Lock(strconv.Itoa(int(ofport)))()
	p.flowMu.Lock()
	owner, owned := p.ofportOwner[ofport]
	p.flowMu.Unlock()
	if owned && owner != sandbox {
		return nil
	}
	if _, err := rz.Flows.SyncObject(ctx, pipeline.CategoryPod, uint64(ofport), nil); err != nil {
		return fmt.Errorf("removing the flows of ofport %d: %w", ofport, err)
	}
	return nil
}

// Ready reports whether the node network is Ready for Pods.
func (p *Pods) Ready(ctx context.Context) bool {
	_, err := p.node(ctx)
	return err == nil
}
