//go:build linux

package hns

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DisableTxChecksum turns transmit checksum offload off on an interface of the current network namespace
// (`ethtool -K <ifName> tx off`). Test harnesses use it for the other veths of a simulated network too.
//
// A veth offloads checksums to its peer: the packets it sends carry only a partial TCP/UDP checksum. OVS's
// userspace datapath reads them from the peer with a raw socket and forwards them as they are, so a kernel
// receiving them from another port drops them for a bad checksum. A Hyper-V vNIC delivers complete checksums
// to the switch; turning the offload off makes the simulated endpoint do the same.
func DisableTxChecksum(ifName string) error {
	if _, err := ethtoolValue(ifName, unix.ETHTOOL_STXCSUM, 0); err != nil {
		return fmt.Errorf("turning transmit checksum offload off on %q: %w", ifName, err)
	}
	return nil
}

// ethtoolValue runs an ethtool command that takes or returns one value (struct ethtool_value) on an interface
// of the current network namespace, and returns the value the kernel left.
func ethtoolValue(ifName string, cmd, data uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("opening a socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	value := struct{ cmd, data uint32 }{cmd: cmd, data: data}
	var req struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte // the rest of struct ifreq's union
	}
	copy(req.name[:unix.IFNAMSIZ-1], ifName)
	req.data = unsafe.Pointer(&value)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return 0, errno
	}
	return value.data, nil
}
