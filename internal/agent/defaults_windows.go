package agent

// Defaults for a Windows node, where containerd's CNI directories are under C:\.
var (
	// DefaultCNIConfDir is where the runtime reads CNI network configurations.
	DefaultCNIConfDir = `C:\etc\cni\net.d`
	// DefaultCNIBinDirs are where the CNI plugins are installed.
	DefaultCNIBinDirs = []string{`C:\opt\cni\bin`}
	// DefaultAuditLogDir holds the audit log of policy decisions (winnet-audit.log).
	DefaultAuditLogDir = `C:\ProgramData\winnet\audit`
	// DefaultStateDir holds the agent's state.
	DefaultStateDir = `C:\ProgramData\winnet`
	// DefaultFlannelSubnetFile is where flanneld writes its lease (its --subnet-file default,
	// "/run/flannel/subnet.env", which Windows resolves on the system drive).
	DefaultFlannelSubnetFile = `C:\run\flannel\subnet.env`
)
