// Package reset tests `winnet-agent reset`: on a simulated node converged by the real agent (real
// OVS, netlink, API server; the Linux-backed HNS simulator), the offline reset gives the node its
// network back with the agent stopped and the API server not involved.
package reset
