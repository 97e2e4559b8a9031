package service

import (
	"encoding/binary"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

var (
	clientMAC = []byte{0x02, 0, 0, 0, 0, 1}
	gwMAC     = []byte{0x02, 0, 0, 0, 0, 2}
	clientIP  = [4]byte{10, 244, 1, 5}
	vip       = [4]byte{10, 96, 0, 20}
)

// frameOf builds an Ethernet/IPv4 frame from the client to the ClusterIP carrying l4.
func frameOf(proto byte, l4 []byte) []byte {
	f := append(append(append([]byte{}, gwMAC...), clientMAC...), 0x08, 0x00)
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+len(l4)))
	copy(ip[12:16], clientIP[:])
	copy(ip[16:20], vip[:])
	binary.BigEndian.PutUint16(ip[10:12], openflow.Checksum(0, ip))
	return append(append(f, ip...), l4...)
}

func tcpSegment(flags byte, seq, ack uint32, payload int) []byte {
	s := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(s[0:2], 40000)
	binary.BigEndian.PutUint16(s[2:4], 80)
	binary.BigEndian.PutUint32(s[4:8], seq)
	binary.BigEndian.PutUint32(s[8:12], ack)
	s[12], s[13] = 5<<4, flags
	return s
}

// TestRejectFrame: the refusal of a SYN is a RST+ACK acknowledging it, of a segment with an ACK a RST
// with that sequence number, of a UDP datagram an ICMP port unreachable quoting it; each comes from the
// address the client sent to, to the client, with the MACs swapped and valid checksums. A RST, ICMP or
// a non-IPv4 frame gets no answer.
func TestRejectFrame(t *testing.T) {
	g := NewWithT(t)
	checkIP := func(out []byte, proto byte) []byte {
		g.Expect(out[0:6]).To(Equal(clientMAC))
		g.Expect(out[6:12]).To(Equal(gwMAC))
		ip := out[14:]
		g.Expect(ip[9]).To(Equal(proto))
		g.Expect([4]byte(ip[12:16])).To(Equal(vip), "from the address the client sent to")
		g.Expect([4]byte(ip[16:20])).To(Equal(clientIP))
		g.Expect(openflow.Checksum(0, ip[:20])).To(BeZero(), "IPv4 header checksum")
		g.Expect(int(binary.BigEndian.Uint16(ip[2:4]))).To(Equal(len(ip)))
		return ip[20:]
	}

	out, err := rejectFrame(frameOf(protoTCP, tcpSegment(tcpFlagSYN, 1000, 0, 0)))
	g.Expect(err).NotTo(HaveOccurred())
	tcp := checkIP(out, protoTCP)
	g.Expect(binary.BigEndian.Uint16(tcp[0:2])).To(BeEquivalentTo(80))
	g.Expect(binary.BigEndian.Uint16(tcp[2:4])).To(BeEquivalentTo(40000))
	g.Expect(tcp[13]).To(Equal(byte(tcpFlagRST | tcpFlagACK)))
	g.Expect(binary.BigEndian.Uint32(tcp[8:12])).To(BeEquivalentTo(1001), "acknowledges the SYN")
	g.Expect(openflow.L4Checksum(vip, clientIP, protoTCP, tcp)).To(BeZero(), "TCP checksum")

	out, err = rejectFrame(frameOf(protoTCP, tcpSegment(tcpFlagACK, 5000, 777, 10)))
	g.Expect(err).NotTo(HaveOccurred())
	tcp = checkIP(out, protoTCP)
	g.Expect(tcp[13]).To(Equal(byte(tcpFlagRST)))
	g.Expect(binary.BigEndian.Uint32(tcp[4:8])).To(BeEquivalentTo(777), "the sequence number the segment acknowledged")

	udp := []byte{0x9c, 0x40, 0, 53, 0, 12, 0, 0, 'q', 'u', 'e', 'r'}
	in := frameOf(protoUDP, udp)
	out, err = rejectFrame(in)
	g.Expect(err).NotTo(HaveOccurred())
	icmp := checkIP(out, protoICMP)
	g.Expect(icmp[0:2]).To(Equal([]byte{3, 3}), "destination unreachable, port unreachable")
	g.Expect(openflow.Checksum(0, icmp)).To(BeZero(), "ICMP checksum")
	g.Expect(icmp[8:]).To(Equal(in[14:14+28]), "quotes the IP header and the first 8 bytes")

	for _, bad := range [][]byte{
		frameOf(protoTCP, tcpSegment(tcpFlagRST, 1, 0, 0)),
		frameOf(protoICMP, []byte{8, 0, 0, 0, 0, 0, 0, 0}),
		append(append(append([]byte{}, gwMAC...), clientMAC...), 0x86, 0xdd, 0, 0),
	} {
		_, err := rejectFrame(bad)
		g.Expect(err).To(HaveOccurred())
	}
}

// TestRejecterSendsFromLocalAndLimits: the refusal goes out as a packet-out from LOCAL to the client's
// port (never from CONTROLLER), only for the pipeline's own packet-ins, and no more than the burst at
// once.
func TestRejecterSendsFromLocalAndLimits(t *testing.T) {
	g := NewWithT(t)
	type sent struct {
		inPort  uint32
		actions string
	}
	var got []sent
	r := newRejecter()
	r.send = func(inPort uint32, actions []openflow.Action, _ []byte) error {
		got = append(got, sent{inPort, openflow.Text(actions[0])})
		return nil
	}
	syn := frameOf(protoTCP, tcpSegment(tcpFlagSYN, 1, 0, 0))
	cookie := openflow.MakeCookie(3, pipeline.CategoryService, 0)
	r.handle(openflow.PacketIn{Table: pipeline.DNATTable, Cookie: cookie, InPort: 7, Frame: syn})
	g.Expect(got).To(Equal([]sent{{openflow.PortLocal, "output:7"}}))
	r.handle(openflow.PacketIn{Table: pipeline.L3ForwardingTable, Cookie: cookie, InPort: 7, Frame: syn})
	r.handle(openflow.PacketIn{Table: pipeline.DNATTable, Cookie: openflow.MakeCookie(3, pipeline.CategoryPolicy, 0), InPort: 7, Frame: syn})
	g.Expect(got).To(HaveLen(1), "packet-ins of other flows are not refusals")
	for range 3 * rejectBurst {
		r.handle(openflow.PacketIn{Table: pipeline.DNATTable, Cookie: cookie, InPort: openflow.PortLocal, Frame: syn})
	}
	g.Expect(len(got)).To(BeNumerically("<=", rejectBurst+1+5), "the rate limit holds a burst")
	g.Expect(got[len(got)-1]).To(Equal(sent{openflow.PortLocal, "IN_PORT"}))
}
