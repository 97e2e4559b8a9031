// Package egress is the agent's reconciler of Egresses: on the node winnet-controller assigned an
// Egress to, it puts the egress IP on the bridge interface and SNATs the selected local Pods'
// connections to outside the cluster to it; elsewhere it makes sure the IP is not there.
package egress
