package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/cni/ipam"
	"github.com/winnet-io/winnet/internal/hostport"
)

// PodNetworkOptions configure the agent's Pod networking: its CNI server, IPAM and PodEndpoints.
type PodNetworkOptions struct {
	NodeName string
	// Host is the node's host plumbing; Host.IPAM is filled in from StateDir.
	Host podendpoint.Host
	// State is the node network reconciler's realised state.
	State *nodenetwork.State
	// CNISocket is the unix socket (Linux) or named pipe (Windows) the shim calls.
	CNISocket string
	// CNIConfDir receives the conflist once the node network is Ready.
	CNIConfDir string
	// StateDir holds IPAM allocations (ipam/) and the Pods' attachments (pods/).
	StateDir string
	// CNIShimPath is the shim binary winnet installed, removed with the node's last sandbox once the
	// node network is gone; empty leaves the shim alone.
	CNIShimPath string
	// ResyncPeriod and NotReadyWait tune the reconciler and ADD, VNICTimeout how long a Pod's port
	// waits for its vNIC after ADD; zero means the defaults.
	ResyncPeriod, NotReadyWait, VNICTimeout time.Duration
	// HostPorts holds the node's hostPort claims, shared with the Service reconciler that realises
	// them; nil serves no hostPort. Each sandbox's mappings are kept in StateDir/hostports.
	HostPorts *hostport.Registry
}

// PodNetwork is the agent's Pod networking, for tests that look inside.
type PodNetwork struct {
	Pods *podendpoint.Pods
	IPAM *ipam.HostLocal

	stateDir, confList, shim string
}

var _ nodenetwork.TeardownListener = (*PodNetwork)(nil)

// NodeNetworkRemoved retires the node's CNI configuration (cni.Retire) once its node network is
// gone: the sandboxes the agent attached are recorded for the shim, which answers their DEL without
// the agent and removes the conflist (and the shim winnet installed) with the last one; with none,
// they go now.
func (p *PodNetwork) NodeNetworkRemoved(ctx context.Context) error {
	var sandboxes []string
	for _, a := range p.Pods.Store().List() {
		sandboxes = append(sandboxes, a.SandboxID)
	}
	// The conflist first, then the agent's Pod state (cni.StateSubdirs): nothing on the node needs
	// it any more.
	finished, err := cni.Retire(p.stateDir, filepath.Dir(p.confList), cni.Retirement{Shim: p.shim, By: "winnet-agent: WindowsNodeNetwork deleted", Time: time.Now()}, sandboxes)
	if err != nil {
		return err
	}
	log := ctrl.LoggerFrom(ctx)
	if finished {
		log.Info("Removed the CNI conflist and the installed shim: no sandbox is left", "file", p.confList, "shim", p.shim)
	} else {
		log.Info("Kept the CNI conflist until the runtime deleted the sandboxes left; the shim answers their DEL", "sandboxes", len(sandboxes))
	}
	return nil
}

// SetupPodNetwork opens the CNI socket and registers, with the manager, the CNI server, the
// conflist writer, the start-up pass over Pod attachments and the PodEndpoint reconciler.
func SetupPodNetwork(ctx context.Context, mgr ctrl.Manager, opts PodNetworkOptions) (*PodNetwork, error) {
	if err := cni.ValidateShimPath(opts.CNIShimPath); err != nil {
		return nil, err
	}
	// Before anything in them is read (SetupNodeNetwork did it already; this is a check then).
	if err := protectDirectories(ctx, mgr.GetClient(), opts.NodeName,
		HostOptions{StateDir: opts.StateDir, CNIConfDir: opts.CNIConfDir, CNIShimPath: opts.CNIShimPath}); err != nil {
		return nil, err
	}
	hostLocal, err := ipam.New(ipam.Options{DataDir: filepath.Join(opts.StateDir, "ipam")})
	if err != nil {
		return nil, err
	}
	opts.Host.IPAM = hostLocal
	store, err := podendpoint.OpenStore(filepath.Join(opts.StateDir, "pods"))
	if err != nil {
		return nil, err
	}
	for _, a := range store.SetAside() {
		ctrl.LoggerFrom(ctx).Info("Set aside a Pod attachment record the agent does not trust", "record", a.Record, "movedTo", a.Path, "reason", a.Err.Error())
		nodeEvent(ctx, mgr.GetClient(), opts.NodeName, corev1.EventTypeWarning, RecordSetAsideReason,
			fmt.Sprintf("Set aside the Pod attachment record %s as %s, not trusted: %v", a.Record, a.Path, a.Err))
	}
	incarnations, err := podendpoint.OpenIncarnations(filepath.Join(opts.StateDir, podendpoint.IncarnationsFileName), store)
	if err != nil {
		// The numbers are given afresh: the Pods present are not checked (pipeline/incarnation.go).
		ctrl.LoggerFrom(ctx).Error(err, "Ignoring the Pod incarnations of the previous agent")
	}
	pods := podendpoint.NewPods(podendpoint.Options{
		Reader: mgr.GetClient(), NodeName: opts.NodeName, Host: opts.Host, State: opts.State, Store: store, Incarnations: incarnations,
		NotReadyWait: opts.NotReadyWait,
		VNICTimeout:  opts.VNICTimeout,
		HostPorts:    opts.HostPorts, HostPortRecords: hostport.Records{Dir: filepath.Join(opts.StateDir, hostport.DirName)},
	})
	recorder, err := NewEventRecorder(mgr, opts.NodeName)
	if err != nil {
		return nil, err
	}
	reconciler := &podendpoint.Reconciler{
		Client: mgr.GetClient(), Recorder: recorder, NodeName: opts.NodeName, Pods: pods,
		ResyncPeriod: opts.ResyncPeriod,
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	l, err := cni.Listen(ctx, opts.CNISocket)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(cniServer{listener: l, handler: pods}); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("adding the CNI server: %w", err)
	}
	conflist := manager.RunnableFunc(func(ctx context.Context) error {
		return writeConfListWhenReady(ctx, pods, opts.State, opts.CNIConfDir, opts.CNISocket, opts.StateDir)
	})
	if err := mgr.Add(conflist); err != nil {
		return nil, fmt.Errorf("adding the conflist writer: %w", err)
	}
	return &PodNetwork{Pods: pods, IPAM: hostLocal, stateDir: opts.StateDir, confList: filepath.Join(opts.CNIConfDir, cni.ConfListName),
		shim: opts.CNIShimPath}, nil
}

// cniServer serves the shim on the agent's socket for as long as the manager runs.
type cniServer struct {
	listener net.Listener
	handler  *podendpoint.Pods
}

func (s cniServer) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("cni-server")
	log.Info("Serving CNI", "address", s.listener.Addr().String())
	return cni.Serve(ctrl.LoggerInto(ctx, log), s.listener, s.handler)
}

// NeedLeaderElection is false: every agent serves its own node.
func (cniServer) NeedLeaderElection() bool { return false }

// writeConfListWhenReady writes the conflist once the node network is Ready, so that the runtime
// schedules no Pod before, and checks it again whenever the node network changes.
func writeConfListWhenReady(ctx context.Context, pods *podendpoint.Pods, state *nodenetwork.State, dir, socket, stateDir string) error {
	log := ctrl.Log.WithName("cni-conflist")
	changes := state.Subscribe()
	for {
		wait := 200 * time.Millisecond // until Ready, and after a failed write
		if pods.Ready(ctx) {
			// A node network Ready again after a teardown: the agent answers DEL again.
			err := cni.Unretire(stateDir)
			written := false
			if err == nil {
				written, err = cni.WriteConfList(dir, socket, stateDir)
			}
			switch {
			case err != nil:
				log.Error(err, "Writing the CNI conflist failed; retrying")
			case written:
				log.Info("Wrote the CNI conflist: the node accepts Pods", "file", filepath.Join(dir, cni.ConfListName))
				fallthrough
			default:
				wait = 10 * time.Second
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-time.After(wait):
		}
	}
}
