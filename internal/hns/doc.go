// Package hns is the narrow Host Networking Service layer of the node network: Transparent networks with the OVS
// switch extension and per-Pod endpoints, with a hcsshim/hcn adapter on Windows and a simulator (in-memory, or
// backed by Linux veth pairs and network namespaces) everywhere else.
package hns
