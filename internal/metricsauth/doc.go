// Package metricsauth holds the RBAC of the metrics endpoints' authentication and authorization,
// which winnet-agent and winnet-controller need only when their metrics are on.
package metricsauth
