// Package nodenetwork holds winnet-agent's WindowsNodeNetwork reconciler: it converges the node's HNS
// network, OVS bridge, uplink, gateway, tunnel and base OpenFlow pipeline, in that order, repairs
// drift, rebuilds after a reboot and restores the host on deletion.
package nodenetwork
