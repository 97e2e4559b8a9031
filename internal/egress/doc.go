// Package egress holds what winnet-controller and the agents must decide alike about Egresses, as
// pure functions: which Egress applies to a Pod, and which node holds each egress IP.
package egress
