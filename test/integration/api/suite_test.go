//go:build !windows

package api

import (
	"testing"

	"github.com/winnet-io/winnet/test/framework"
)

// server is the kube-apiserver every test in this package talks to.
var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "API tests", &server, framework.MainOptions{})
}
