package openflow

import "encoding/binary"

// Checksum is the Internet checksum (RFC 1071) of b, starting from the partial sum: of an IPv4
// header or an ICMP message with its checksum field zero (sum 0), or of a TCP or UDP segment after
// its pseudo-header (L4Checksum). The packets winnet writes itself (the Services' rejections, the
// packet traces) are checksummed with it.
func Checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i : i+2]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// L4Checksum is the TCP or UDP checksum of segment (whose checksum field is zero) with the IPv4
// pseudo-header of src, dst and proto.
func L4Checksum(src, dst [4]byte, proto byte, segment []byte) uint16 {
	var sum uint32
	sum += uint32(binary.BigEndian.Uint16(src[0:2])) + uint32(binary.BigEndian.Uint16(src[2:4]))
	sum += uint32(binary.BigEndian.Uint16(dst[0:2])) + uint32(binary.BigEndian.Uint16(dst[2:4]))
	sum += uint32(proto) + uint32(len(segment))
	return Checksum(sum, segment)
}
