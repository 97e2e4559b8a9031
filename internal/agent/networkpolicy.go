package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/servedcrd"
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
	// Audit is the node's audit log (OpenAuditLog); nil audits nothing.
	Audit *auditlog.Logger
}

// AuditLogRefusedReason is the reason of the Warning Event on the Node when the audit log's
// directory or file is refused (a link, another owner): the agent runs without the audit log.
const AuditLogRefusedReason = "AuditLogRefused"

// OpenAuditLog opens the node's audit log and has the manager run its writer. An empty directory
// turns it off (nil). A directory or file that is refused (internal/securefs: a planted link,
// another owner) leaves the agent running without it: the error is logged and a Warning Event on
// the Node says why, since the node's network must not depend on its audit log.
func OpenAuditLog(ctx context.Context, mgr ctrl.Manager, nodeName string, opts auditlog.Options) (*auditlog.Logger, error) {
	if opts.Dir == "" {
		return nil, nil
	}
	opts.Node = nodeName
	l, err := auditlog.Open(opts)
	if err != nil {
		mgr.GetLogger().Error(err, "The audit log is refused: no policy decision is logged on this node", "directory", opts.Dir)
		nodeEvent(ctx, mgr.GetClient(), nodeName, corev1.EventTypeWarning, AuditLogRefusedReason,
			fmt.Sprintf("The audit log in %s is refused, no policy decision is logged on this node until an administrator repairs it and restarts winnet-agent: %v", opts.Dir, err))
		return nil, nil
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		l.Run(ctx)
		return nil
	})); err != nil {
		return nil, fmt.Errorf("adding the audit log writer: %w", err)
	}
	mgr.GetLogger().Info("Audit log of policy decisions", "file", l.Path())
	return l, nil
}

// SetupNetworkPolicy registers the NetworkPolicy reconciler with the manager. Its remote Pods are
// the peers its policies name, through Pod watches the API server filters (networkpolicy.PeerPods),
// opened with protobuf and kept trimmed to what policy reads; the node's own Pods come from the
// manager's cache. ClusterNetworkPolicy nodes peers are Node watches of the same kind
// (networkpolicy.PeerNodes), opened only while a policy names them.
func SetupNetworkPolicy(mgr ctrl.Manager, opts NetworkPolicyOptions) error {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the client of the peer Pod watches: %w", err)
	}
	cluster, err := servedcrd.ClusterNetworkPolicies(mgr)
	if err != nil {
		return err
	}
	recorder, err := NewEventRecorder(mgr, opts.NodeName)
	if err != nil {
		return err
	}
	r := &networkpolicy.Reconciler{
		ClusterPolicies: cluster,
		Client:          mgr.GetClient(), Peers: networkpolicy.NewPeerPods(cs), Nodes: networkpolicy.NewPeerNodes(cs), APIReader: mgr.GetAPIReader(), Local: opts.Local,
		Recorder: recorder, NodeName: opts.NodeName, State: opts.State, ResyncPeriod: opts.ResyncPeriod,
		Audit: opts.Audit,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if opts.Pods != nil {
		opts.Pods.SetPolicyGate(r)
	}
	return nil
}
