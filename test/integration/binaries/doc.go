// Package binaries builds winnet's commands and checks what a user sees when asking them for help or
// their version, that the CNI shim links none of the agent's code and that the daemons export their
// build as a metric.
package binaries
