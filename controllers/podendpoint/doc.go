// Package podendpoint attaches Pods to the node network: the agent's CNI handler (ADD, DEL, CHECK,
// GC, STATUS) gives each Pod sandbox one HNS endpoint, an OVS port of the same name, an address from
// host-local IPAM and its flows, and the PodEndpoint reconciler records that attachment in the API,
// repairs drift and tears attachments down when their Pod is gone.
//
// A Pod's attachment is one ordered list of steps, in lifecycle.go — address (IPAM), HNS endpoint,
// namespace attach, flows, OVS port (unbound), vNIC binding — each with its do, undo, check, repair
// and orphan sweep; ADD, DEL, CHECK, drift repair, GC and start-up all drive that list. The helpers
// the steps call live beside it: pods.go (endpoint, port, ofports and flows), drift.go (the flows'
// check and sync), vnic.go (the waiter that binds the port once the vNIC appears after ADD) and
// sweep.go (start-up and the flows of every attachment); cni.go holds the CNI entry points and
// podendpoint_controller.go the reconciler.
package podendpoint
