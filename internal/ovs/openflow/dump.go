package openflow

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"time"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
	"antrea.io/ofnet/ofctrl"
)

// Dump is what a read-only look at a bridge's switch found: its flows (with their counters) and
// groups, one line each.
type Dump struct {
	Flows  []string
	Groups []string
}

// DumpSwitch reads every flow and group of the bridge whose management socket (Linux) or named
// pipe (Windows) is address, over a connection of its own, and changes nothing: unlike Connect it
// neither advances the round nor replays or deletes flows, so it can run beside the agent (the
// support bundle). A line renders the OpenFlow 1.5 reply as libOpenflow decodes it, not in
// ovs-ofctl's syntax: the table, priority, cookie and counters, then the match fields (OXM names
// for the fields winnet uses, class:field otherwise) and the instructions.
func DumpSwitch(ctx context.Context, address string) (Dump, error) {
	conn, err := ofctrl.DialUnixOrNamedPipe(address)
	if err != nil {
		return Dump{}, fmt.Errorf("connecting to %q: %w", address, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	} else {
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
	}
	hello, err := common.NewHello(openflow15.VERSION)
	if err != nil {
		return Dump{}, err
	}
	hello.Header.Xid = 1
	if err := writeMessage(conn, hello); err != nil {
		return Dump{}, fmt.Errorf("saying hello to %q: %w", address, err)
	}
	flows := openflow15.NewFlowStatsRequest()
	flows.TableId = openflow15.OFPTT_ALL
	groups := openflow15.NewGroupMultipartRequest(openflow15.OFPG_ALL)
	for i, req := range []struct {
		typ  uint16
		body util.Message
	}{{openflow15.MultipartType_FlowDesc, flows}, {openflow15.MultipartType_GroupDesc, groups}} {
		mp := &openflow15.MultipartRequest{Header: openflow15.NewOfp15Header(), Type: req.typ, Body: []util.Message{req.body}}
		mp.Header.Type = openflow15.Type_MultiPartRequest
		mp.Xid = uint32(2 + i)
		if err := writeMessage(conn, mp); err != nil {
			return Dump{}, fmt.Errorf("requesting the switch's state from %q: %w", address, err)
		}
	}
	var d Dump
	r := bufio.NewReader(conn)
	pending := map[uint32]bool{2: true, 3: true}
	for len(pending) > 0 {
		msg, err := readMessage(r, conn)
		if err != nil {
			return d, fmt.Errorf("reading the switch's state from %q: %w", address, err)
		}
		switch m := msg.(type) {
		case *openflow15.MultipartReply:
			for _, b := range m.Body {
				switch v := b.(type) {
				case *openflow15.FlowDesc:
					d.Flows = append(d.Flows, flowLine(v))
				case *openflow15.GroupDesc:
					d.Groups = append(d.Groups, groupLine(v))
				}
			}
			if m.Flags&openflow15.OFPMPF_REPLY_MORE == 0 {
				delete(pending, m.Xid)
			}
		case *openflow15.ErrorMsg:
			return d, fmt.Errorf("the switch at %q refused request %d: type %d code %d", address, m.Xid, m.Type, m.Code)
		}
	}
	return d, nil
}

func writeMessage(w io.Writer, m util.Message) error {
	b, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readMessage reads one OpenFlow message, answering echo requests on the way.
func readMessage(r *bufio.Reader, w io.Writer) (util.Message, error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		length := binary.BigEndian.Uint16(hdr[2:4])
		if length < 8 {
			return nil, fmt.Errorf("invalid OpenFlow message length %d", length)
		}
		b := make([]byte, length)
		copy(b, hdr[:])
		if _, err := io.ReadFull(r, b[8:]); err != nil {
			return nil, err
		}
		switch hdr[1] {
		case openflow15.Type_EchoRequest:
			reply := append([]byte(nil), b...)
			reply[1] = openflow15.Type_EchoReply
			if _, err := w.Write(reply); err != nil {
				return nil, err
			}
			continue
		case openflow15.Type_MultiPartReply, openflow15.Type_Error:
			return openflow15.Parse(b)
		}
	}
}

func flowLine(f *openflow15.FlowDesc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table=%d priority=%d cookie=%#x", f.TableId, f.Priority, f.Cookie)
	for _, s := range f.Stats.Fields {
		if c, ok := s.(*openflow15.PBCountStatField); ok {
			switch c.Header.Field {
			case openflow15.XST_OFB_PACKET_COUNT:
				fmt.Fprintf(&b, " packets=%d", c.Count)
			case openflow15.XST_OFB_BYTE_COUNT:
				fmt.Fprintf(&b, " bytes=%d", c.Count)
			}
		}
	}
	if f.IdleTimeout != 0 || f.HardTimeout != 0 {
		fmt.Fprintf(&b, " idle_timeout=%d hard_timeout=%d", f.IdleTimeout, f.HardTimeout)
	}
	b.WriteString(" match:")
	for _, m := range f.Match.Fields {
		fmt.Fprintf(&b, " %s=%s", oxmName(m.Class, m.Field), compactValue(m.Value))
		if m.HasMask && m.Mask != nil {
			fmt.Fprintf(&b, "/%s", compactValue(m.Mask))
		}
	}
	b.WriteString(" instructions:")
	for _, in := range f.Instructions {
		b.WriteString(" " + compact(in))
	}
	return b.String()
}

func groupLine(g *openflow15.GroupDesc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "group_id=%d type=%d", g.GroupId, g.Type)
	for _, bk := range g.Buckets {
		b.WriteString(" bucket: " + compact(bk))
	}
	return b.String()
}

// oxmNames names the match fields of the classes winnet uses (OpenFlow basic 0x8000, Nicira
// 0x0000 and 0x0001).
var oxmNames = map[[2]int]string{
	{0x8000, 0}: "in_port", {0x8000, 3}: "eth_dst", {0x8000, 4}: "eth_src", {0x8000, 5}: "eth_type",
	{0x8000, 8}: "ip_dscp", {0x8000, 10}: "ip_proto", {0x8000, 11}: "ipv4_src", {0x8000, 12}: "ipv4_dst",
	{0x8000, 13}: "tcp_src", {0x8000, 14}: "tcp_dst", {0x8000, 15}: "udp_src", {0x8000, 16}: "udp_dst",
	{0x8000, 19}: "icmpv4_type", {0x8000, 20}: "icmpv4_code", {0x8000, 21}: "arp_op", {0x8000, 22}: "arp_spa",
	{0x8000, 23}: "arp_tpa", {0x8000, 38}: "tunnel_id", {0x0001, 31}: "tun_ipv4_src", {0x0001, 32}: "tun_ipv4_dst",
	{0x0001, 37}: "conj_id", {0x0001, 105}: "ct_state", {0x0001, 106}: "ct_zone", {0x0001, 107}: "ct_mark", {0x0001, 108}: "ct_label",
	{0x0001, 0}: "reg0", {0x0001, 1}: "reg1", {0x0001, 2}: "reg2", {0x0001, 3}: "reg3",
	{0x0001, 4}: "reg4", {0x0001, 5}: "reg5", {0x0001, 6}: "reg6", {0x0001, 7}: "reg7",
	{0x0001, 8}: "reg8", {0x0001, 9}: "reg9",
	{0x8001, 0}: "xreg0", {0x8001, 1}: "xreg1", {0x8001, 2}: "xreg2", {0x8001, 3}: "xreg3",
}

func oxmName(class uint16, field uint8) string {
	if n, ok := oxmNames[[2]int{int(class), int(field)}]; ok {
		return n
	}
	return fmt.Sprintf("oxm(%#x:%d)", class, field)
}

// compactValue renders a match field's value: the one field of its wrapper (Ipv4DstField{Ipv4Dst:
// 10.0.0.1} is 10.0.0.1), or compact's rendering.
func compactValue(v any) string {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if rv.Kind() == reflect.Struct {
		var only reflect.Value
		n := 0
		for i := range rv.NumField() {
			if f := rv.Type().Field(i); f.IsExported() && !strings.HasPrefix(f.Name, "Pad") {
				only, n = rv.Field(i), n+1
			}
		}
		if n == 1 {
			var b strings.Builder
			writeCompact(&b, only, 0)
			return b.String()
		}
	}
	return compact(v)
}

// compact renders a decoded message's fields, leaving out headers, lengths and padding.
func compact(v any) string {
	var b strings.Builder
	writeCompact(&b, reflect.ValueOf(v), 0)
	return b.String()
}

func writeCompact(b *strings.Builder, v reflect.Value, depth int) {
	if depth > 8 {
		b.WriteString("...")
		return
	}
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		v = v.Elem()
	}
	if ip, ok := v.Interface().(net.IP); ok {
		b.WriteString(ip.String())
		return
	}
	if mac, ok := v.Interface().(net.HardwareAddr); ok {
		b.WriteString(mac.String())
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		b.WriteString(strings.TrimPrefix(v.Type().Name(), "Action") + "{")
		first := true
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			if !v.Type().Field(i).IsExported() || strings.HasPrefix(name, "Pad") || strings.Contains(name, "Header") ||
				strings.HasSuffix(name, "Len") || name == "Length" {
				continue
			}
			if !first {
				b.WriteString(" ")
			}
			first = false
			b.WriteString(name + ":")
			writeCompact(b, v.Field(i), depth+1)
		}
		b.WriteString("}")
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			for i := range v.Len() {
				fmt.Fprintf(b, "%02x", v.Index(i).Uint())
			}
			return
		}
		b.WriteString("[")
		for i := range v.Len() {
			if i > 0 {
				b.WriteString(" ")
			}
			writeCompact(b, v.Index(i), depth+1)
		}
		b.WriteString("]")
	default:
		fmt.Fprintf(b, "%v", v.Interface())
	}
}
