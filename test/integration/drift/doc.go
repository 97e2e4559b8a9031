// Package drift holds the integration test of drift repaired from events: with the agents'
// periodic checks set to many minutes, a flow, every flow, a port, a route and an address are
// taken from a converged node and must come back at once.
package drift
