// Package buildinfo exports the running binary's build (winnet's version, the git revision, the Go
// version) as the metric winnet_build_info on controller-runtime's registry, which winnet-agent and
// winnet-controller serve.
package buildinfo
