// Package binaries builds winnet's three commands and checks what a user sees when asking them for
// help, and that the CNI shim links none of the agent's code.
package binaries
