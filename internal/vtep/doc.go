// Package vtep derives each winnet node's VTEP MAC, the inner MAC its tunnel peers address it by.
package vtep
