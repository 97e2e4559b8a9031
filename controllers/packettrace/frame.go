package packettrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Packet is the traced packet as the source Pod would send it.
type Packet struct {
	SrcMAC, DstMAC   net.HardwareAddr
	Src, Dst         netip.Addr
	Protocol         uint8
	SrcPort, DstPort uint16
	// Tag is the DSCP value (1..63).
	Tag uint8
}

const (
	ethHeaderLen = 14
	ipHeaderLen  = 20
)

// Frame builds the Ethernet frame: a TCP SYN, an empty UDP datagram or an ICMP echo request, with
// the tag in the DSCP bits of the IPv4 header and valid checksums.
func (p Packet) Frame() ([]byte, error) {
	if !p.Src.Is4() || !p.Dst.Is4() || len(p.SrcMAC) != 6 || len(p.DstMAC) != 6 || p.Tag == 0 || p.Tag > 63 {
		return nil, fmt.Errorf("building a trace packet from %v (%v) to %v (%v) with tag %d: IPv4 addresses, MACs and a tag 1..63 are needed", p.Src, p.SrcMAC, p.Dst, p.DstMAC, p.Tag)
	}
	var l4 []byte
	switch p.Protocol {
	case openflow.ProtoTCP:
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:2], p.SrcPort)
		binary.BigEndian.PutUint16(l4[2:4], p.DstPort)
		binary.BigEndian.PutUint32(l4[4:8], uint32(p.SrcPort)<<16|uint32(p.Tag))
		l4[12] = 5 << 4
		l4[13] = 0x02 // SYN
		binary.BigEndian.PutUint16(l4[14:16], 64240)
		binary.BigEndian.PutUint16(l4[16:18], openflow.L4Checksum(p.Src.As4(), p.Dst.As4(), openflow.ProtoTCP, l4))
	case openflow.ProtoUDP:
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[0:2], p.SrcPort)
		binary.BigEndian.PutUint16(l4[2:4], p.DstPort)
		binary.BigEndian.PutUint16(l4[4:6], 8)
		binary.BigEndian.PutUint16(l4[6:8], openflow.L4Checksum(p.Src.As4(), p.Dst.As4(), openflow.ProtoUDP, l4))
	case openflow.ProtoICMP:
		l4 = make([]byte, 8)
		l4[0] = 8 // echo request
		binary.BigEndian.PutUint16(l4[4:6], uint16(p.Tag))
		binary.BigEndian.PutUint16(l4[6:8], 1)
		binary.BigEndian.PutUint16(l4[2:4], openflow.Checksum(0, l4))
	default:
		return nil, fmt.Errorf("building a trace packet: IP protocol %d is not TCP, UDP or ICMP", p.Protocol)
	}
	out := make([]byte, ethHeaderLen+ipHeaderLen+len(l4))
	copy(out[0:6], p.DstMAC)
	copy(out[6:12], p.SrcMAC)
	binary.BigEndian.PutUint16(out[12:14], 0x0800)
	h := out[ethHeaderLen : ethHeaderLen+ipHeaderLen]
	h[0] = 4<<4 | 5
	h[1] = p.Tag << 2
	binary.BigEndian.PutUint16(h[2:4], uint16(ipHeaderLen+len(l4)))
	binary.BigEndian.PutUint16(h[4:6], uint16(p.SrcPort)^uint16(p.Tag)<<8)
	h[6] = 0x40 // don't fragment
	h[8] = 64
	h[9] = p.Protocol
	src, dst := p.Src.As4(), p.Dst.As4()
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
	binary.BigEndian.PutUint16(h[10:12], openflow.Checksum(0, h))
	copy(out[ethHeaderLen+ipHeaderLen:], l4)
	return out, nil
}

// frameHeader is what a report reads from the packet-in's frame: the destination as the pipeline
// left it (after a DNAT, the endpoint).
type frameHeader struct {
	Dst     netip.Addr
	DstPort uint16
	Proto   uint8
}

var errNotIPv4Frame = errors.New("not an IPv4 frame")

func parseFrame(frame []byte) (frameHeader, error) {
	if len(frame) < ethHeaderLen+ipHeaderLen || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return frameHeader{}, errNotIPv4Frame
	}
	ip := frame[ethHeaderLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipHeaderLen || len(ip) < ihl {
		return frameHeader{}, errNotIPv4Frame
	}
	h := frameHeader{Dst: netip.AddrFrom4([4]byte(ip[16:20])), Proto: ip[9]}
	if (h.Proto == openflow.ProtoTCP || h.Proto == openflow.ProtoUDP) && len(ip) >= ihl+4 {
		h.DstPort = binary.BigEndian.Uint16(ip[ihl+2 : ihl+4])
	}
	return h, nil
}
