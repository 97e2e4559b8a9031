//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "winnet-demo: the demo simulates nodes with Linux network namespaces: run it on Linux")
	os.Exit(1)
}
