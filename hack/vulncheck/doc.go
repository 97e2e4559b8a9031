// Command vulncheck reads govulncheck's JSON reports (one per GOOS) and fails when the code calls a
// vulnerable symbol of an advisory that the allow-list does not hold as a live decision. hack/vulncheck.sh
// runs it in make verify.
package main
