package networkpolicy

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// The audit log of policy decisions (docs/operations.md, "Audit logs"). A Namespace or a
// ClusterNetworkPolicy annotated AuditLogAnnotation "true" has its rules' decision flows send the
// first packet of each new connection they decide to the agent (pipeline.AuditAction), which
// names the rule from the flow's cookie and the last full pass's index (nodenetwork.PolicyIndex)
// and hands a record to the node's audit log (internal/auditlog), which deduplicates, limits and
// writes it. Only new connections reach the rule tables, so an established connection is never
// logged again; a dropped connection is new at each retransmission (nothing is committed for it),
// each one a packet-in, folded into one line by the log's window when they fall inside it.

// auditValue reads an object's AuditLogAnnotation: on for "true"; off for "false" or none; off
// and not valid for any other value.
func auditValue(annotations map[string]string) (on, valid bool) {
	v, ok := annotations[networkv1alpha1.AuditLogAnnotation]
	switch {
	case !ok || v == networkv1alpha1.AuditLogOff:
		return false, true
	case v == networkv1alpha1.AuditLogOn:
		return true, true
	}
	return false, false
}

// auditAnnotationChanged tells whether the AuditLogAnnotation differs between two versions of an
// object.
func auditAnnotationChanged(old, now client.Object) bool {
	a, aok := old.GetAnnotations()[networkv1alpha1.AuditLogAnnotation]
	b, bok := now.GetAnnotations()[networkv1alpha1.AuditLogAnnotation]
	return a != b || aok != bok
}

// warnAuditValue emits one Warning Event per object and value of an AuditLogAnnotation that is
// neither "true" nor "false": the object is not audited, and the Event says what is accepted.
func (r *Reconciler) warnAuditValue(ctx context.Context, obj client.Object) {
	v := obj.GetAnnotations()[networkv1alpha1.AuditLogAnnotation]
	if r.auditWarned == nil {
		r.auditWarned = map[types.UID]string{}
	}
	if r.auditWarned[obj.GetUID()] == v {
		return
	}
	r.auditWarned[obj.GetUID()] = v
	ctrl.LoggerFrom(ctx).Info("Audit log annotation with a value that is neither true nor false: not audited", "object", obj.GetName(), "value", v)
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, networkv1alpha1.AuditLogValueReason, "Audit",
			"On node %s: annotation %s=%q is not audited: the value must be %q (log the decisions of its policies) or %q",
			r.NodeName, networkv1alpha1.AuditLogAnnotation, truncateValue(v), networkv1alpha1.AuditLogOn, networkv1alpha1.AuditLogOff)
	}
}

func truncateValue(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// Reasons of the Events on the node's WindowsNodeNetwork when the audit log is suspended, and when
// it resumes.
const (
	AuditLogSuspendedReason = "AuditLogSuspended"
	AuditLogResumedReason   = "AuditLogResumed"
)

// auditing tells whether this pass audits: the node has an audit log and it is not suspended. A
// suspension (the log dropped decisions beyond its rate for a sustained period) takes the
// packet-ins out of every audited flow for its cooldown, so that a flood of new connections stops
// costing the switch an upcall and the agent a packet-in each; the change of state is an Event on
// the node's WindowsNodeNetwork.
func (r *Reconciler) auditing(ctx context.Context) bool {
	if r.Audit == nil {
		return false
	}
	suspended, s := r.Audit.Suspended()
	if suspended != r.auditSuspended {
		r.auditSuspended = suspended
		wnn := &networkv1alpha1.WindowsNodeNetwork{}
		err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, wnn)
		switch {
		case suspended:
			ctrl.LoggerFrom(ctx).Info("Audit log suspended: decisions were dropped beyond its rate", "since", s.Since, "until", s.Until, "dropped", s.Dropped)
			if err == nil && r.Recorder != nil {
				r.Recorder.Eventf(wnn, nil, corev1.EventTypeWarning, AuditLogSuspendedReason, "Audit",
					"The audit log dropped %d decisions beyond its rate since %s: audited flows send nothing to the agent until %s, and nothing is logged meanwhile",
					s.Dropped, s.Since.UTC().Format(time.RFC3339), s.Until.UTC().Format(time.RFC3339))
			}
		default:
			ctrl.LoggerFrom(ctx).Info("Audit log resumed")
			if err == nil && r.Recorder != nil {
				r.Recorder.Eventf(wnn, nil, corev1.EventTypeNormal, AuditLogResumedReason, "Audit", "The audit log's cooldown is over: audited flows send their decisions again")
			}
		}
	}
	return !suspended
}

// handleAudit has the bridge's policy packet-ins go to the audit log, once per bridge.
func (r *Reconciler) handleAudit(b *openflow.Bridge) {
	if r.Audit == nil || r.auditBridge == b {
		return
	}
	r.auditBridge = b
	b.SetPacketInHandler(pipeline.CategoryPolicy, r.auditPacketIn)
}

// auditPacketIn names the decision of one audited flow's packet-in and queues it for the log. It
// runs on the OpenFlow connection's reader: it reads the headers and the index, and does not block.
func (r *Reconciler) auditPacketIn(p openflow.PacketIn) {
	rec, err := r.auditRecord(p, time.Now())
	if err != nil {
		r.Audit.Unnamed()
		return
	}
	r.Audit.Submit(rec)
}

// auditRecord is the record of a packet-in at time now: its 5-tuple and the rule its flow's cookie
// names.
func (r *Reconciler) auditRecord(p openflow.PacketIn, now time.Time) (auditlog.Record, error) {
	h, err := auditHeaders(p.Frame)
	if err != nil {
		return auditlog.Record{}, err
	}
	rec := auditlog.Record{Time: now, SrcIP: h.src.String(), DstIP: h.dst.String(), Protocol: protocolName(h.proto), SrcPort: h.srcPort, DstPort: h.dstPort}
	index := r.State.PolicyIndex()
	named := func(n nodenetwork.PolicyRuleName) {
		rec.PolicyKind, rec.Namespace, rec.Name, rec.Tier = string(n.Kind), n.Policy.Namespace, n.Policy.Name, n.Tier
		rec.Rule, rec.Direction, rec.Action = n.Rule(), n.Direction(), n.Action
	}
	_, dir, _, drop := pipeline.AuditObject(p.Cookie)
	switch {
	case drop:
		port, isolation := p.Regs[pipeline.TargetOFPortField.Reg], index.IngressIsolation
		rec.Direction = "ingress"
		if dir == pipeline.PolicyEgress {
			port, isolation, rec.Direction = p.InPort, index.EgressIsolation, "egress"
		}
		by := isolation[port]
		if len(by) == 0 {
			return rec, errUnnamed
		}
		rec.PolicyKind, rec.Namespace, rec.Rule, rec.Action = string(nodenetwork.KindNetworkPolicy), by[0].Namespace, auditlog.DefaultDenyRule, auditlog.ActionDrop
		for _, n := range by {
			rec.IsolatedBy = append(rec.IsolatedBy, n.Name)
		}
		slices.Sort(rec.IsolatedBy)
	default:
		n, ok := index.RuleOfCookie(p.Cookie)
		if !ok {
			return rec, errUnnamed
		}
		named(n)
	}
	return rec, nil
}

var errUnnamed = errors.New("a policy packet-in whose rule the index does not name")

type headers struct {
	src, dst         netip.Addr
	proto            uint8
	srcPort, dstPort uint16
}

// auditHeaders reads the IPv4 addresses, protocol and TCP or UDP ports of a frame (no ports for a
// fragment after the first, or for other protocols). It reads the headers only.
func auditHeaders(frame []byte) (headers, error) {
	const eth = 14
	if len(frame) < eth+20 || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return headers{}, errors.New("not an IPv4 frame")
	}
	ip := frame[eth:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl {
		return headers{}, errors.New("not an IPv4 frame")
	}
	h := headers{src: netip.AddrFrom4([4]byte(ip[12:16])), dst: netip.AddrFrom4([4]byte(ip[16:20])), proto: ip[9]}
	fragOffset := binary.BigEndian.Uint16(ip[6:8]) & 0x1fff
	if (h.proto == openflow.ProtoTCP || h.proto == openflow.ProtoUDP) && fragOffset == 0 && len(ip) >= ihl+4 {
		h.srcPort = binary.BigEndian.Uint16(ip[ihl : ihl+2])
		h.dstPort = binary.BigEndian.Uint16(ip[ihl+2 : ihl+4])
	}
	return h, nil
}

func protocolName(p uint8) string {
	switch p {
	case openflow.ProtoTCP:
		return "TCP"
	case openflow.ProtoUDP:
		return "UDP"
	case openflow.ProtoICMP:
		return "ICMP"
	}
	return strings.ToUpper(strconv.Itoa(int(p)))
}
