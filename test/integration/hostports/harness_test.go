//go:build linux

package hostports_test

import (
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/framework"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "hostPort integration tests", &server, framework.MainOptions{})
}

const converge = 30 * time.Second
