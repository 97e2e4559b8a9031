package openflow

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"
	. "github.com/onsi/gomega"
)

// TestBundleConnAnswersEchoRequests: a bundle connection left idle for the switch's probe interval
// gets an echo request; the reply carries its xid and body, or the switch would drop the connection.
func TestBundleConnAnswersEchoRequests(t *testing.T) {
	g := NewWithT(t)
	sw, conn := net.Pipe()
	defer sw.Close()
	c := &bundleConn{conn: conn, in: newReplyQueue()}
	defer c.close()
	go c.in.read(conn, c.echo)

	request := []byte{openflow15.VERSION, openflow15.Type_EchoRequest, 0, 11, 0, 0, 0, 7, 'a', 'b', 'c'}
	_, err := sw.Write(request)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sw.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	reply := make([]byte, 11)
	_, err = io.ReadFull(sw, reply)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply[1]).To(Equal(uint8(openflow15.Type_EchoReply)))
	g.Expect(binary.BigEndian.Uint16(reply[2:])).To(Equal(uint16(11)))
	g.Expect(binary.BigEndian.Uint32(reply[4:])).To(Equal(uint32(7)))
	g.Expect(string(reply[8:])).To(Equal("abc"))
	g.Expect(c.in.failed()).To(BeFalse())
}
