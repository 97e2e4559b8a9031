// Package podendpoint attaches Pods to the node network: the agent's CNI handler (ADD, DEL, CHECK,
// GC, STATUS) gives each Pod sandbox one HNS endpoint, an OVS port of the same name, an address from
// host-local IPAM and its flows, and the PodEndpoint reconciler records that attachment in the API,
// repairs drift and tears attachments down when their Pod is gone.
package podendpoint
