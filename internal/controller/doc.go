// Package controller wires winnet-controller: the cluster-wide, leader-elected manager that derives
// WindowsNodeNetworks and RemoteSubnetRoutes from Nodes.
package controller
