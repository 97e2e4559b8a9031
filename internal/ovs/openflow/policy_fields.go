package openflow

import (
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// Match fields and actions that NetworkPolicy needs: conjunctive matches (a rule's dimensions as
// separate flows, joined by conj_id) and port ranges as value/mask matches.

// TpDstMasked matches the TCP or UDP destination port under mask (a power-of-two aligned range
// of ports, such as 0x50/0xfffc for 80-83); a mask of 0xffff is an exact TpDst.
func TpDstMasked(proto uint8, port, mask uint16) MatchField {
	if mask == 0xffff {
		return TpDst(proto, port)
	}
	return MatchField{kind: kindTpDst, value: uint64(port & mask), mask: uint64(mask), reg: proto}
}

// ConjID matches packets that completed conjunction id: one flow of every clause of the
// conjunction matched them at the same priority.
func ConjID(id uint32) MatchField { return MatchField{kind: kindConjID, value: uint64(id)} }

type conjunctionAction struct {
	id   uint32
	k, n uint8
}

// Conjunction makes the flow clause k (1-based) of conjunction id, which has n clauses (2 to 64).
func Conjunction(id uint32, k, n uint8) Action { return conjunctionAction{id: id, k: k, n: n} }

func (a conjunctionAction) text() string { return fmt.Sprintf("conjunction(%d,%d/%d)", a.id, a.k, a.n) }

func (a conjunctionAction) encode() (openflow15.Action, error) {
	if a.n < 2 || a.n > 64 || a.k < 1 || a.k > a.n {
		return nil, fmt.Errorf("conjunction(%d,%d/%d): clause k of n needs 1 <= k <= n and 2 <= n <= 64", a.id, a.k, a.n)
	}
	// On the wire the clause is 0-based (OVS's ofp-actions.c decode_NXAST_RAW_CONJUNCTION).
	return openflow15.NewNXActionConjunction(a.k-1, a.n, a.id), nil
}

func (a conjunctionAction) appendKey(b []byte) []byte {
	return append(b, 'j', byte(a.id>>24), byte(a.id>>16), byte(a.id>>8), byte(a.id), a.k, a.n)
}

func (a conjunctionAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }
