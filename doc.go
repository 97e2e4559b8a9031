// Package winnet is winnet's version: the release in the VERSION file beside it, embedded into every
// binary, and the git revision the go command recorded.
package winnet
