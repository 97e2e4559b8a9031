//go:build linux

package hostnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// routeBatchSize bounds the route messages written in one sendmsg call (about 60 bytes each).
// The kernel handles a write's messages one after the other and queues one acknowledgement per
// message before the write returns; acknowledgements that do not fit in the socket's receive
// buffer are dropped (the read then fails with ENOBUFS). Measured with the default buffer
// (rmem_default, 208 KiB): 256 acknowledgements fit, 512 do not; 128 leave a margin, and
// configure asks for a larger buffer still.
const routeBatchSize = 128

// routeReceiveBuffer is the receive buffer asked for; the kernel caps it at rmem_max.
const routeReceiveBuffer = 1 << 20

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
// receive buffer and timeout.
func (s *routeSocket) configure() error {
	// Error acknowledgements echo only the header of the refused message, not all of it.
	if err := unix.SetsockoptInt(s.fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		return fmt.Errorf("setting NETLINK_CAP_ACK: %w", err)
	}
	if err := unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, routeReceiveBuffer); err != nil {
		return fmt.Errorf("setting the receive buffer size: %w", err)
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
	return h.sendRouteMessages(ctx, "adding routes", len(routes),
		func(i int, seq uint32) []byte { return newRouteMessage(routes[i], seq) },
		func(i int, errno unix.Errno) error { return fmt.Errorf("adding route %s: %w", routes[i], errno) })
}

// deleteStaleRoutes deletes the kernel routes in batches; a route already gone is not an error.
func (h *netlinkHost) deleteStaleRoutes(ctx context.Context, routes []kernelRoute) error {
	return h.sendRouteMessages(ctx, "deleting stale routes", len(routes),
		func(i int, seq uint32) []byte { return delRouteMessage(routes[i].raw, seq) },
		func(i int, errno unix.Errno) error {
			if errno == unix.ESRCH {
				return nil
			}
			return fmt.Errorf("deleting stale route %s: %w", routes[i].Route, errno)
		})
}

// sendRouteMessages sends n route requests, built by message, in batches of routeBatchSize
// messages per write, and reads every acknowledgement. refused turns the error number of message
// i into its error (or nil to ignore it); one refused message does not stop the others. what
// names the whole operation in the error of a socket failure or a cancelled context, which stop
// it.
func (h *netlinkHost) sendRouteMessages(ctx context.Context, what string, n int,
	message func(i int, seq uint32) []byte, refused func(i int, errno unix.Errno) error) error {
	if n == 0 {
		return nil
	}
	s, err := h.openRouteSocket()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer s.close()
	var errs []error
	for start := 0; start < n; start += routeBatchSize {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("%s: %w", what, err))...)
		}
		end := min(start+routeBatchSize, n)
		first := s.seq + 1
		var req []byte
		for i := start; i < end; i++ {
			s.seq++
			req = append(req, message(i, s.seq)...)
		}
		errnos, err := s.exchange(req, first, end-start)
		for j, errno := range errnos {
			if errno == 0 {
				continue
			}
			if err := refused(start+j, errno); err != nil {
				errs = append(errs, err)
			}
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("%s: %w", what, err))...)
		}
	}
	return errors.Join(errs...)
}

// exchange writes the n messages of req, numbered from first, in one write and returns the error
// number of each (0 for success) in message order, and an error when the socket failed and some
// messages are not confirmed.
func (s *routeSocket) exchange(req []byte, first uint32, n int) ([]unix.Errno, error) {
	if err := unix.Sendto(s.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sending %d route requests: %w", n, err)
	}
	s.sent.Add(uint64(n))
	return s.acks(first, n)
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
			return errnos, fmt.Errorf("reading acknowledgements (%d of %d requests unconfirmed): %w", pending, n, err)
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

// delRouteMessage is the RTM_DELROUTE request, with an acknowledgement requested, for the route
// k exactly as the kernel listed it: destination, gateway, interface, metric, table, protocol,
// scope and type.
func delRouteMessage(k netlink.Route, seq uint32) []byte {
	req := nl.NewNetlinkRequest(unix.RTM_DELROUTE, unix.NLM_F_ACK)
	req.Seq = seq
	msg := nl.NewRtDelMsg()
	msg.Family = uint8(k.Family)
	ones, _ := k.Dst.Mask.Size()
	msg.Dst_len = uint8(ones)
	msg.Table = uint8(k.Table)
	msg.Protocol = uint8(k.Protocol)
	msg.Scope = uint8(k.Scope)
	msg.Type = uint8(k.Type)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.RTA_DST, ipBytes(k.Dst.IP, k.Family)))
	if k.Gw != nil {
		req.AddData(nl.NewRtAttr(unix.RTA_GATEWAY, ipBytes(k.Gw, k.Family)))
	}
	if k.Priority > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_PRIORITY, nl.Uint32Attr(uint32(k.Priority))))
	}
	req.AddData(nl.NewRtAttr(unix.RTA_OIF, nl.Uint32Attr(uint32(k.LinkIndex))))
	return req.Serialize()
}

// ipBytes is ip in the length of its family's addresses.
func ipBytes(ip net.IP, family int) []byte {
	if family == unix.AF_INET {
		return ip.To4()
	}
	return ip.To16()
}
