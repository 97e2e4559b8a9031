// Package v1alpha1 contains the API types of the network.winnet.io group: the desired network of a
// Windows node (WindowsNodeNetwork), routes to other nodes' Pod subnets (RemoteSubnetRoute) and the
// network attachment of each Pod (PodEndpoint).
// +kubebuilder:object:generate=true
// +groupName=network.winnet.io
package v1alpha1
