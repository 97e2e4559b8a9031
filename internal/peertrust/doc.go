// Package peertrust tells who serves the other end of a local connection (a Windows named pipe's
// server process, a unix socket's peer) and refuses a server that is not run by the node's
// administrators, before the shim or the agent sends it anything.
package peertrust
