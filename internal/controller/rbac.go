package controller

// The permissions winnet-controller needs; `make manifests` turns them into config/rbac/controller.
//
// Nodes: read, and write through nodes/status only, as flanneld writes its own record there (the status
// subresource keeps a merge patch of metadata.annotations and drops any change to the spec). The Helm
// chart's admission policy winnet-node-flannel-record lets that write change nothing but the flannel
// record's annotations: a Node's labels, taints, spec and status are not winnet's.
//
// Leases: in winnet-controller's own namespace only (a Role; the Helm chart puts it in the release
// namespace): leader election (get, create, update: client-go's LeaseLock) and the uninstall Lease
// (get), and the agents' Egress Leases (list, watch: when each node's agent last renewed its Lease,
// docs/egress.md's fencing). Never cluster-wide: a Lease write elsewhere could take kube-controller-manager's or
// kube-scheduler's leader election or forge a node heartbeat in kube-node-lease.

// TokenReviews and SubjectAccessReviews, to authenticate and authorize each scrape of the metrics
// endpoint, are in internal/metricsauth: the chart grants them only when metrics are on.

// +kubebuilder:rbac:groups=network.winnet.io,resources=windowsnodenetworks,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=policy.networking.k8s.io,resources=clusternetworkpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.networking.k8s.io,resources=clusternetworkpolicies/status,verbs=get;update;patch
// The ClusterNetworkPolicy CRD, that one by name (servedcrd: a list or watch with the field
// selector metadata.name is authorised by resourceNames, as a get is): whether the cluster serves
// the policies, to realise them from the time their CRD is installed and stop when it is deleted,
// without a restart. No other CRD is read.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=clusternetworkpolicies.policy.networking.k8s.io,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.winnet.io,resources=remotesubnetroutes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=network.winnet.io,resources=remotesubnetroutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=network.winnet.io,resources=flannelinterops,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.winnet.io,resources=packettraces,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=network.winnet.io,resources=packettraces/status,verbs=get;update;patch
// Egresses: winnet-controller assigns each to a node and writes only their status; to report a
// Pod selected by two Egresses it watches Pods and Namespaces (their labels).
// +kubebuilder:rbac:groups=network.winnet.io,resources=egresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=network.winnet.io,resources=egresses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update,namespace=winnet-system
