// Package securefs creates, checks, repairs, writes and reads winnet's directories and files on a
// node so that only the node's administrators (root on Linux; SYSTEM and Administrators on Windows)
// can change them: every writer of winnet's state, CNI configuration and binaries goes through it.
package securefs
