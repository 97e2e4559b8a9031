// Package hostcmd runs every external command that winnet's tests, benchmarks and demo execute, from
// one list that says where each comes from (a Debian package, hack/setup-test-deps.sh, or a build of
// this repository), and fails at once, naming the command and its source, when one is missing or
// not on the list.
package hostcmd
