package openflow

import (
	"net"
	"testing"

	"antrea.io/libOpenflow/openflow15"
	. "github.com/onsi/gomega"
)

// TestFlowLine: a dumped flow renders its table, priority, cookie, match fields by name with their
// values, and its instructions, without headers, lengths or padding.
func TestFlowLine(t *testing.T) {
	g := NewWithT(t)
	fd := &openflow15.FlowDesc{TableId: 30, Priority: 200, Cookie: 0x1010000000000}
	fd.Match.AddField(*openflow15.NewInPortField(5))
	fd.Match.AddField(*openflow15.NewEthTypeField(0x0800))
	fd.Match.AddField(*openflow15.NewIpv4DstField(net.ParseIP("10.244.1.2").To4(), nil))
	fd.Instructions = []openflow15.Instruction{openflow15.NewInstrGotoTable(45)}
	g.Expect(flowLine(fd)).To(Equal("table=30 priority=200 cookie=0x1010000000000 match: in_port=5 eth_type=2048 ipv4_dst=10.244.1.2 instructions: InstrGotoTable{TableId:45}"))
}
