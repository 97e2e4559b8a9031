// Package packettrace runs PacketTraces: winnet-controller tags them and decides their verdict
// (Reconciler), and each agent installs the trace flows, injects the packet from the source Pod's
// node and records its own node's hop from the packet-ins (AgentReconciler).
package packettrace
