package agent

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

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
	// ClusterNetworkPolicies are realised when the cluster serves their CRD (the chart installs it);
	// without it the agent realises NetworkPolicies alone, and says so.
	cluster := true
	gk := schema.GroupKind{Group: cnpv1beta1.GroupName, Kind: "ClusterNetworkPolicy"}
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, cnpv1beta1.GroupVersion.Version); err != nil {
		cluster = false
		mgr.GetLogger().Info("ClusterNetworkPolicies are not realised: the cluster does not serve their CRD (restart the agent once it does)",
			"group", gk.Group, "version", cnpv1beta1.GroupVersion.Version, "reason", err.Error())
	}
	r := &networkpolicy.Reconciler{
		ClusterPolicies: cluster,
		Client:          mgr.GetClient(), Peers: networkpolicy.NewPeerPods(cs), Nodes: networkpolicy.NewPeerNodes(cs), APIReader: mgr.GetAPIReader(), Local: opts.Local,
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
