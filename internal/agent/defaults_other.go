//go:build !windows

package agent

// Defaults for a Linux node (simulated nodes, the Linux nodes of a mixed cluster).
var (
	// DefaultCNIConfDir is where the runtime reads CNI network configurations.
	DefaultCNIConfDir = "/etc/cni/net.d"
	// DefaultCNIBinDirs are where the CNI plugins are installed: the usual place and Debian's.
	DefaultCNIBinDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}
	// DefaultAuditLogDir holds the audit log of policy decisions (winnet-audit.log).
	DefaultAuditLogDir = "/var/log/winnet"
	// DefaultStateDir holds the agent's state.
	DefaultStateDir = "/var/lib/winnet"
	// DefaultFlannelSubnetFile is where flanneld writes its lease (its --subnet-file default,
	// "/run/flannel/subnet.env", which Windows resolves on the system drive).
	DefaultFlannelSubnetFile = "/run/flannel/subnet.env"
)
