package agent

// The permissions winnet-agent needs; `make manifests` turns them into config/rbac/agent (update and
// patch of windowsnodenetworks are for the finalizer). Writes are
// narrowed further to the agent's own node by the Helm chart's admission policy.

// +kubebuilder:rbac:groups=network.winnet.io,resources=windowsnodenetworks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=network.winnet.io,resources=windowsnodenetworks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=network.winnet.io,resources=windowsnodenetworks/finalizers,verbs=update
// +kubebuilder:rbac:groups=network.winnet.io,resources=remotesubnetroutes,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.winnet.io,resources=podendpoints,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=network.winnet.io,resources=podendpoints/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=network.winnet.io,resources=podendpoints/finalizers,verbs=update
// +kubebuilder:rbac:groups=network.winnet.io,resources=packettraces,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.winnet.io,resources=egresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.winnet.io,resources=packettraces/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.networking.k8s.io,resources=clusternetworkpolicies,verbs=get;list;watch
// The ClusterNetworkPolicy CRD, that one by name (servedcrd: a list or watch with the field
// selector metadata.name is authorised by resourceNames, as a get is): whether the cluster serves
// the policies, to realise them from the time their CRD is installed and stop when it is deleted,
// without a restart. No other CRD is read.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=clusternetworkpolicies.policy.networking.k8s.io,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// The node's Egress Lease (controllers/egress Fence), in winnet's namespace only (a Role; the Helm chart
// puts it in the release namespace): the agent renews it so that winnet-controller knows it may hold
// egress IPs. RBAC cannot name one Lease per node for create; the chart's admission policy
// winnet-agent-egress-lease lets an agent write only winnet-egress-<its node>, held by its node.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=winnet-system

// The metrics endpoint's TokenReviews and SubjectAccessReviews are in internal/metricsauth: the chart
// grants them only when metrics are on.
