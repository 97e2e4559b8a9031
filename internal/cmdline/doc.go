// Package cmdline sets up the flags of winnet's commands and subcommands (winnet-agent, its reset;
// winnet-controller, its uninstall) one way: a flag set that returns errors instead of exiting,
// whose -help prints the command's usage and its flags (hidden ones left out), and the API
// server's configuration from --kubeconfig.
//
// What the commands do with their flags stays in each command: their flags, defaults and checks
// only look alike.
package cmdline
