// Package remoteroute holds winnet-agent's RemoteSubnetRoute reconciler: it routes the node to every
// other node's Pod subnets (and to manual subnets), through the tunnel or unencapsulated, with one
// host route and a few flows per route.
package remoteroute
