package openflow

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	. "github.com/onsi/gomega"
)

// TestCheckCounts compares a table counted by identity with the cache: flows of one identity the
// switch has fewer of are all candidates and the surplus of the sorted texts are Missing; more
// flows of an identity of our categories than cached are Unexpected, one each; identities with
// cookie 0, of categories the cache does not hold or in skip are left out.
func TestCheckCounts(t *testing.T) {
	g := NewWithT(t)
	br := newTestBridge()
	same := routeFlows(4)
	for i := range same[:3] {
		same[i].Cookie = 1 // three flows of one identity, different matches
	}
	syncCache(t, br, 1, same)
	snap := br.snapshot()
	g.Expect(snap.tables).To(Equal([]uint8{70}))

	id := func(f Flow) flowID { return flowID{f.Table, f.Priority, MakeCookie(0, 1, f.Cookie)} }
	texts := func(n int) []string {
		var out []string
		for _, c := range br.flows {
			if c.cookie == MakeCookie(0, 1, 1) {
				f := c.flow(nil)
				out = append(out, f.String())
			}
		}
		slices.Sort(out)
		return out[n:]
	}

	// Everything there: no difference.
	full := map[flowID]int{id(same[0]): 3, id(same[3]): 1}
	diffs, missing := snap.check(br.flows, 70, full, nil)
	g.Expect(diffs).To(BeEmpty())
	g.Expect(missing).To(BeEmpty())

	// One of the three there: two missing, all three candidates.
	diffs, missing = snap.check(br.flows, 70, map[flowID]int{id(same[0]): 1, id(same[3]): 1}, nil)
	g.Expect(missing).To(HaveLen(3))
	var want []Difference
	for _, text := range texts(1) {
		want = append(want, Difference{Kind: Missing, Flow: text})
	}
	g.Expect(diffs).To(ConsistOf(want))
	// Left out when skipped.
	diffs, missing = snap.check(br.flows, 70, map[flowID]int{id(same[3]): 1}, map[flowID]bool{id(same[0]): true})
	g.Expect(diffs).To(BeEmpty())
	g.Expect(missing).To(BeEmpty())

	// Two more of a cached identity, and one of another object of category 1: three unexpected.
	// Cookie 0 and another category's cookie are not ours to report.
	other := flowID{70, 200, MakeCookie(0, 1, 99)}
	got := map[flowID]int{id(same[0]): 3, id(same[3]): 3, other: 1, {70, 5, 0}: 4, {70, 200, MakeCookie(0, 2, 1)}: 1}
	diffs, missing = snap.check(br.flows, 70, got, nil)
	g.Expect(missing).To(BeEmpty())
	unexpected := func(k flowID) Difference {
		return Difference{Kind: Unexpected, Flow: fmt.Sprintf("cookie=%#x, table=70, priority=200", k.cookie)}
	}
	g.Expect(diffs).To(ConsistOf(unexpected(id(same[3])), unexpected(id(same[3])), unexpected(other)))
}

// TestCountReplyReadsIdentities counts a flow dump's reply from its bytes as libOpenflow decodes
// it: flows with matches and instructions of different lengths, several of one identity, counted
// by table, priority and cookie; the more flag read; a reply of another type, a description cut
// short or one whose length does not tile the reply is an error and counts nothing.
func TestCountReplyReadsIdentities(t *testing.T) {
	g := NewWithT(t)
	var descs []*openflow15.FlowDesc
	for i, f := range []struct {
		table    uint8
		priority uint16
		cookie   uint64
		fields   int
	}{{70, 100, 0x11, 0}, {70, 100, 0x11, 2}, {70, 200, 0x11, 1}, {31, 100, 0x12, 3}, {70, 100, 0x13, 1}} {
		d := openflow15.NewFlowDesc()
		d.TableId, d.Priority, d.Cookie = f.table, f.priority, f.cookie
		for k := range f.fields {
			switch k {
			case 0:
				d.Match.AddField(*openflow15.NewInPortField(uint32(i + 1)))
			case 1:
				mask := net.IPv4Mask(255, 255, 255, 0)
				m := net.IP(mask)
				d.Match.AddField(*openflow15.NewIpv4DstField(net.IPv4(10, 0, byte(i), 0), &m))
			default:
				d.Match.AddField(*openflow15.NewEthTypeField(0x0800))
			}
		}
		d.AddInstruction(openflow15.NewInstrGotoTable(f.table + 1))
		descs = append(descs, d)
	}
	reply := func(more bool, descs ...*openflow15.FlowDesc) []byte {
		body := []byte{0, openflow15.MultipartType_FlowDesc, 0, 0, 0, 0, 0, 0}
		if more {
			body[3] = openflow15.OFPMPF_REPLY_MORE
		}
		for _, d := range descs {
			b, err := d.MarshalBinary()
			g.Expect(err).NotTo(HaveOccurred())
			body = append(body, b...)
		}
		return body
	}

	// What libOpenflow decodes from the same message.
	body := reply(true, descs...)
	msg := binary.BigEndian.AppendUint32([]byte{openflow15.VERSION, openflow15.Type_MultiPartReply, 0, 0}, 7)
	binary.BigEndian.PutUint16(msg[2:], uint16(8+len(body)))
	parsed, err := openflow15.Parse(append(msg, body...))
	g.Expect(err).NotTo(HaveOccurred())
	want := map[flowID]int{}
	for _, m := range parsed.(*openflow15.MultipartReply).Body {
		fd := m.(*openflow15.FlowDesc)
		want[flowID{fd.TableId, fd.Priority, fd.Cookie}]++
	}
	g.Expect(want).To(Equal(map[flowID]int{{70, 100, 0x11}: 2, {70, 200, 0x11}: 1, {31, 100, 0x12}: 1, {70, 100, 0x13}: 1}))

	got := map[flowID]int{}
	more, err := countReply(body, got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(more).To(BeTrue())
	g.Expect(got).To(Equal(want))
	// The last reply of a dump, counted into the same map.
	more, err = countReply(reply(false, descs[0]), got)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(more).To(BeFalse())
	g.Expect(got[flowID{70, 100, 0x11}]).To(Equal(3))
	// An empty table's reply.
	empty := map[flowID]int{}
	_, err = countReply(reply(false), empty)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(empty).To(BeEmpty())

	for name, bad := range map[string][]byte{
		"another type":      append([]byte{0, openflow15.MultipartType_GroupDesc}, body[2:]...),
		"cut short":         body[:len(body)-5],
		"head cut short":    append(reply(false, descs[0]), 0, 40, 0, 0),
		"a zero length":     append(reply(false), make([]byte, flowDescHead)...),
		"too long a length": append(reply(false), append([]byte{0xff, 0xff}, make([]byte, flowDescHead)...)...),
		"no multipart head": body[:6],
	} {
		counted := map[flowID]int{}
		_, err := countReply(bad, counted)
		g.Expect(err).To(HaveOccurred(), name)
		g.Expect(counted).To(BeEmpty(), name)
	}
}
