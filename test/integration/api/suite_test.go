//go:build !windows

package api

import (
	"fmt"
	"os"
	"testing"

	"github.com/winnet-io/winnet/test/framework"
)

// server is the kube-apiserver every test in this package talks to.
var server *framework.APIServer

func TestMain(m *testing.M) {
	var err error
	server, err = framework.StartAPIServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the API tests need a real kube-apiserver: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := server.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the API server: %v\n", err)
	}
	os.Exit(code)
}
