package agent

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/hostport"
)

func TestReservedBindPorts(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ReservedBindPorts("127.0.0.1:8081", ":8443")).To(Equal([]hostport.Reserved{
		{Protocol: "TCP", Port: 8081, What: "winnet-agent's health probes"}, {Protocol: "TCP", Port: 8443, What: "winnet-agent's metrics"}}))
	g.Expect(ReservedBindPorts("0", "")).To(BeEmpty())
	g.Expect(ReservedBindPorts("127.0.0.1:0", "[::]:9090")).To(Equal([]hostport.Reserved{{Protocol: "TCP", Port: 9090, What: "winnet-agent's metrics"}}))
}
