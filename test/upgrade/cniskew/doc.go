// Package cniskew runs the CNI shim and the agent of two releases against each other, as a node
// has them during a rollout: this tree's agent with the previous release's shim, and the previous
// release's agent with this tree's shim (hack/previous-release; `make previous-release` builds it).
// Its tests build only with the tag upgrade: go test -tags upgrade ./test/upgrade/cniskew/.
package cniskew
