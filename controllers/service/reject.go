package service

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/time/rate"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Refusing connections to a Service port without endpoints, as kube-proxy does: the client gets a TCP
// RST, or an ICMP port unreachable for UDP, at once instead of a timeout.
//
// The pipeline sends the first packet of such a connection to the agent (packet-in); the agent builds
// the answer and injects it with a packet-out that outputs it on the port the client's packet came in
// on. Why here and not in OVS:
//   - OVS cannot build a RST or an ICMP error from a flow: the answer needs a packet the agent makes;
//   - the packet-out's in_port is LOCAL, never CONTROLLER: OVS's Windows datapath dereferences a NULL
//     in_port for a packet-out from CONTROLLER and crashes the host before OVS 3.6 (ovs-issues 280,
//     fixed by defb8f33; Antrea sends from LOCAL for the same reason, antrea 4992), and Antrea's Windows
//     build is 3.0.5; pipeline.CheckWindows holds RejectPacketOut to that rule;
//   - packet-ins are rate-limited here, in the agent, not with an OpenFlow meter: the Windows datapath
//     has meters only since OVS 3.1. Beyond the limit the packet is dropped and the client retries
//     (TCP) or times out, as with no refusal at all.
//
// The answer never goes through conntrack: it is output directly, so no connection is created for it.

// Limits of the refusals a node answers: per second, and in a burst.
const (
	rejectRate  = 100
	rejectBurst = 200
)

// rejecter answers the packet-ins of Service ports without endpoints.
type rejecter struct {
	limiter *rate.Limiter
	// send injects a packet-out; the bridge's SendPacketOut.
	send func(inPort uint32, actions []openflow.Action, frame []byte) error
	// errs counts answers that could not be built or sent (malformed packets, a closed connection).
	onError func(error)
}

func newRejecter() *rejecter {
	return &rejecter{limiter: rate.NewLimiter(rejectRate, rejectBurst)}
}

// handle answers one packet-in if it is the pipeline's refusal request and the rate allows it. It runs
// on the OpenFlow connection's reader and does not block.
func (r *rejecter) handle(p openflow.PacketIn) {
	if p.Table != pipeline.DNATTable || openflow.CookieCategory(p.Cookie) != pipeline.CategoryService {
		return
	}
	if !r.limiter.Allow() {
		return
	}
	answer, err := rejectFrame(p.Frame)
	if err == nil {
		out := pipeline.RejectPacketOut(p.InPort)
		err = r.send(out.InPort, out.Actions, answer)
	}
	if err != nil && r.onError != nil {
		r.onError(err)
	}
}

const (
	ethHeaderLen  = 14
	etherTypeIPv4 = 0x0800
	protoICMP     = 1
	protoTCP      = 6
	protoUDP      = 17
	tcpFlagFIN    = 0x01
	tcpFlagSYN    = 0x02
	tcpFlagRST    = 0x04
	tcpFlagACK    = 0x10
)

var errNotRefusable = errors.New("not an IPv4 TCP or UDP packet that can be refused")

// rejectFrame builds the answer that refuses the connection frame opens: a TCP RST (RFC 9293 3.10.7.1:
// with the ACK of the segment's sequence and length when it carried no ACK, else with its ACK as
// sequence), or for UDP an ICMP destination unreachable, port unreachable (RFC 1122 3.2.2.1) quoting the
// datagram's IP header and first 8 bytes. It comes from the address the client sent to, with the MACs
// swapped.
func rejectFrame(frame []byte) ([]byte, error) {
	if len(frame) < ethHeaderLen+20 || binary.BigEndian.Uint16(frame[12:14]) != etherTypeIPv4 {
		return nil, errNotRefusable
	}
	ip := frame[ethHeaderLen:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ip[0]>>4 != 4 || ihl < 20 || total < ihl || len(ip) < total {
		return nil, errNotRefusable
	}
	ip = ip[:total]
	src, dst := [4]byte(ip[12:16]), [4]byte(ip[16:20])
	l4 := ip[ihl:]

	var proto byte
	var payload []byte
	switch ip[9] {
	case protoTCP:
		if len(l4) < 20 {
			return nil, errNotRefusable
		}
		flags := l4[13]
		if flags&tcpFlagRST != 0 {
			return nil, fmt.Errorf("%w: never answer a RST", errNotRefusable)
		}
		dataOff := int(l4[12]>>4) * 4
		if dataOff < 20 || dataOff > len(l4) {
			return nil, errNotRefusable
		}
		rst := make([]byte, 20)
		copy(rst[0:2], l4[2:4]) // source port: the port the client sent to
		copy(rst[2:4], l4[0:2])
		if flags&tcpFlagACK != 0 {
			copy(rst[4:8], l4[8:12])
			rst[13] = tcpFlagRST
		} else {
			segLen := uint32(len(l4) - dataOff)
			if flags&tcpFlagSYN != 0 {
				segLen++
			}
			if flags&tcpFlagFIN != 0 {
				segLen++
			}
			binary.BigEndian.PutUint32(rst[8:12], binary.BigEndian.Uint32(l4[4:8])+segLen)
			rst[13] = tcpFlagRST | tcpFlagACK
		}
		rst[12] = 5 << 4
		binary.BigEndian.PutUint16(rst[16:18], openflow.L4Checksum(dst, src, protoTCP, rst))
		proto, payload = protoTCP, rst
	case protoUDP:
		quote := min(len(ip), ihl+8)
		icmp := make([]byte, 8+quote)
		icmp[0], icmp[1] = 3, 3 // destination unreachable, port unreachable
		copy(icmp[8:], ip[:quote])
		binary.BigEndian.PutUint16(icmp[2:4], openflow.Checksum(0, icmp))
		proto, payload = protoICMP, icmp
	default:
		return nil, errNotRefusable
	}

	out := make([]byte, ethHeaderLen+20+len(payload))
	copy(out[0:6], frame[6:12])
	copy(out[6:12], frame[0:6])
	binary.BigEndian.PutUint16(out[12:14], etherTypeIPv4)
	h := out[ethHeaderLen : ethHeaderLen+20]
	h[0] = 4<<4 | 5
	binary.BigEndian.PutUint16(h[2:4], uint16(20+len(payload)))
	h[6] = 0x40 // don't fragment
	h[8] = 64
	h[9] = proto
	copy(h[12:16], dst[:])
	copy(h[16:20], src[:])
	binary.BigEndian.PutUint16(h[10:12], openflow.Checksum(0, h))
	copy(out[ethHeaderLen+20:], payload)
	return out, nil
}
