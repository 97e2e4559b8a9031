// Command check verifies that every command on test/hostcmd's list that a Debian package or the
// toolchain provides is installed: `make test` and `make demo` run it right after installing, so a
// missing command fails in seconds with its package's name. With -packages it prints the Debian
// packages of the missing commands instead (hack/setup-test-deps.sh installs them).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/winnet-io/winnet/test/hostcmd"
)

func main() {
	packages := flag.Bool("packages", false, "print the Debian packages of the missing commands, space-separated, and exit 0")
	flag.Parse()
	if *packages {
		fmt.Println(strings.Join(hostcmd.Packages(), " "))
		return
	}
	errs := hostcmd.Missing()
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, err)
	}
	if len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "hostcmd: %d command(s) missing: run hack/setup-test-deps.sh as root\n", len(errs))
		os.Exit(1)
	}
	fmt.Printf("hostcmd: every installed command of the list is present (%d of %d; the built ones are checked where they are built)\n",
		len(hostcmd.List())-built(), len(hostcmd.List()))
}

func built() int {
	n := 0
	for _, c := range hostcmd.List() {
		if c.Kind == hostcmd.Built {
			n++
		}
	}
	return n
}
