// Package binaries builds winnet's three commands and checks what a user sees when asking them for
// help.
package binaries
