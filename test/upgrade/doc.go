// Package upgrade is make test-upgrade: the previous release's cluster (hack/previous-release, built by make
// previous-release) upgraded to this tree's release and rolled back under live traffic, its agents restarted,
// and the two version skews held, each measured packet by packet. Its tests build only with the tag upgrade.
package upgrade
