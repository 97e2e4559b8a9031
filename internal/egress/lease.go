package egress

// LeasePrefix starts the name of every node's Egress Lease: LeaseName.
const LeasePrefix = "winnet-egress-"

// LeaseName is the name of the node's Egress Lease, in winnet's namespace: its agent renews it while
// it may hold egress IPs (fencing, docs/egress.md), winnet-controller reads it, the uninstall deletes it.
func LeaseName(node string) string { return LeasePrefix + node }
