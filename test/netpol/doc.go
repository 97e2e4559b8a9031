// Package netpol judges winnet's NetworkPolicy with an oracle winnet did not write: cyclonus
// (github.com/mattfenwick/cyclonus) generates the test cases and computes each case's truth table
// from the specification, and the tests play every case on two simulated nodes (real API server,
// real OVS, real agents, Pods attached through CNI) and probe every cell with real packets.
//
// It is a module of its own (test/netpol/go.mod) so that cyclonus and what it pulls in (ginkgo in
// non-test files, resty, cobra) stay out of winnet's go.mod; `go test ./...` at the repository
// root does not enter it, so the Makefile calls it explicitly (make test runs a fixed sample, make
// conformance-netpol every case).
package netpol
