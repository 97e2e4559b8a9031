package v1alpha1

// AuditLogAnnotation turns on the audit log of policy decisions: on a Namespace, for its
// NetworkPolicies' rules and the default drops of its isolated Pods; on a ClusterNetworkPolicy, for
// its rules. Its one value that turns it on is AuditLogOn; "false" (or no annotation) is off, and
// any other value is off too, with a Warning Event (AuditLogValueReason) saying what is accepted.
// Each agent writes the decisions on its node's Pods to winnet-audit.log in its --audit-log-dir
// (docs/operations.md, "Audit logs").
const AuditLogAnnotation = "network.winnet.io/audit-log"

// Values of AuditLogAnnotation.
const (
	AuditLogOn  = "true"
	AuditLogOff = "false"
)

// AuditLogValueReason is the reason of the Warning Event on an object whose AuditLogAnnotation has
// a value other than AuditLogOn or AuditLogOff.
const AuditLogValueReason = "AuditLogValueInvalid"
