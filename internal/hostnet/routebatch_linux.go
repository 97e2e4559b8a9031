//go:build linux

package hostnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// routeBatchSize bounds the RTM_NEWROUTE messages written in one sendmsg call (about 60 bytes
// each). The kernel handles a write's messages one after the other and queues one
// acknowledgement per message before the write returns; acknowledgements that do not fit in the
// socket's receive buffer are dropped, and 128 of them (each charged about 1 KiB) fit in the
// default one (rmem_default, 208 KiB) with room to spare.
const routeBatchSize = 128

// routeAckTimeout bounds the wait for the acknowledgements of one batch.
const routeAckTimeout = 30 * time.Second

// routeSocket is a NETLINK_ROUTE socket sending route requests in batches: one write carries
// many messages, and every message's acknowledgement is matched to its route by sequence number.
// It is used by one goroutine at a time.
type routeSocket struct {
	fd int
	// seq is the sequence number of the last message sent.
	seq uint32
	buf []byte
	// sent counts the messages written (netlinkHost.routeMessages).
	sent *atomic.Uint64
}

// openRouteSocket opens a NETLINK_ROUTE socket in the host's network namespace.
func (h *netlinkHost) openRouteSocket() (*routeSocket, error) {
	fd := -1
	err := h.inNetNS(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket: %w", err)
	}
	s := &routeSocket{fd: fd, buf: make([]byte, nl.RECEIVE_BUFFER_SIZE), sent: &h.routeMessages}
	if err := s.configure(); err != nil {
		s.close()
		return nil, fmt.Errorf("configuring a netlink socket: %w", err)
	}
	return s, nil
}

// configure binds the socket, asks for acknowledgements without the echoed request and sets the
// receive timeout.
func (s *routeSocket) configure() error {
	// Error acknowledgements echo only the header of the refused message, not all of it.
	if err := unix.SetsockoptInt(s.fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		return fmt.Errorf("setting NETLINK_CAP_ACK: %w", err)
	}
	tv := unix.NsecToTimeval(routeAckTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("setting the receive timeout: %w", err)
	}
	if err := unix.Bind(s.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("binding: %w", err)
	}
	return nil
}

func (s *routeSocket) close() { _ = unix.Close(s.fd) }

// replaceRoutes creates or replaces routes (already validated and normalized) in batches. A
// route the kernel refuses does not stop the others: the error names every refused route.
func (h *netlinkHost) replaceRoutes(ctx context.Context, routes []Route) error {
	if len(routes) == 0 {
		return nil
	}
	s, err := h.openRouteSocket()
	if err != nil {
		return fmt.Errorf("adding %d routes: %w", len(routes), err)
	}
	defer s.close()
	var errs []error
	for batch := range slices.Chunk(routes, routeBatchSize) {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("adding routes: %w", err))...)
		}
		refused, err := s.replace(batch)
		errs = append(errs, refused...)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("adding routes: %w", err))...)
		}
	}
	return errors.Join(errs...)
}

// replace writes one RTM_NEWROUTE replace request per route in a single write and reads their
// acknowledgements. It returns the errors of the routes the kernel refused, and an error when
// the socket failed and some routes are not confirmed.
func (s *routeSocket) replace(batch []Route) (refused []error, err error) {
	first := s.seq + 1
	var req []byte
	for _, r := range batch {
		s.seq++
		req = append(req, newRouteMessage(r, s.seq)...)
	}
	if err := unix.Sendto(s.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sending %d route requests: %w", len(batch), err)
	}
	s.sent.Add(uint64(len(batch)))
	errnos, err := s.acks(first, len(batch))
	for i, errno := range errnos {
		if errno != 0 {
			refused = append(refused, fmt.Errorf("adding route %s: %w", batch[i], errno))
		}
	}
	return refused, err
}

// acks reads the acknowledgements of the n messages numbered from first: the error number of
// each (0 for success), in message order.
func (s *routeSocket) acks(first uint32, n int) ([]unix.Errno, error) {
	errnos := make([]unix.Errno, n)
	acked := make([]bool, n)
	for pending := n; pending > 0; {
		nr, from, err := unix.Recvfrom(s.fd, s.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// EAGAIN is the receive timeout, ENOBUFS acknowledgements the kernel dropped.
			return errnos, fmt.Errorf("reading acknowledgements (%d of %d routes unconfirmed): %w", pending, n, err)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(s.buf[:nr])
		if err != nil {
			return errnos, fmt.Errorf("parsing acknowledgements: %w", err)
		}
		for _, m := range msgs {
			i := int(m.Header.Seq - first)
			if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq < first || i >= n || acked[i] || len(m.Data) < 4 {
				continue
			}
			acked[i] = true
			pending--
			errnos[i] = unix.Errno(-int32(binary.NativeEndian.Uint32(m.Data)))
		}
	}
	return errnos, nil
}

// newRouteMessage is the RTM_NEWROUTE create-or-replace request for r, with an acknowledgement
// requested: a unicast route of the main table, protocol static or winnet's when owned, scope
// link when it has no gateway.
func newRouteMessage(r Route, seq uint32) []byte {
	req := nl.NewNetlinkRequest(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.Seq = seq
	msg := nl.NewRtMsg()
	msg.Family = unix.AF_INET
	if r.Dst.Addr().Is6() {
		msg.Family = unix.AF_INET6
	}
	msg.Dst_len = uint8(r.Dst.Bits())
	msg.Table = unix.RT_TABLE_MAIN
	msg.Type = unix.RTN_UNICAST
	msg.Protocol = unix.RTPROT_STATIC
	if r.Owned {
		msg.Protocol = LinuxRouteProtocol
	}
	msg.Scope = unix.RT_SCOPE_UNIVERSE
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.RTA_DST, r.Dst.Addr().AsSlice()))
	if r.Gateway.IsValid() {
		req.AddData(nl.NewRtAttr(unix.RTA_GATEWAY, r.Gateway.AsSlice()))
		if r.OnLink {
			msg.Flags = unix.RTNH_F_ONLINK
		}
	} else {
		msg.Scope = unix.RT_SCOPE_LINK
	}
	if r.Metric > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_PRIORITY, nl.Uint32Attr(uint32(r.Metric))))
	}
	req.AddData(nl.NewRtAttr(unix.RTA_OIF, nl.Uint32Attr(uint32(r.LinkIndex))))
	return req.Serialize()
}
