// Package preflight checks whether a node is fit for winnet, before install and on a converged
// node: each Check reads Facts that platform adapters gathered (the registry, the service control
// manager, HNS, OVSDB, the API server, the host's network stack, the directories' owners and DACLs)
// and answers PASS, WARN, FAIL or SKIP with the fix in one line.
package preflight
