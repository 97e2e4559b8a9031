//go:build linux

package simnode

import (
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/winnet-io/winnet/internal/hns"
)

// DisableTxChecksum turns transmit checksum offload off on an interface of the named namespace (`ethtool -K
// <ifName> tx off`), as the HNS simulator does for Pod interfaces.
//
// A veth offloads checksums to its peer: the packets it sends carry only a partial TCP/UDP checksum. A node's
// OVS userspace datapath reads them from its uplink with a raw socket and forwards them as they are, so the
// node's kernel drops them for a bad checksum. Real hosts on a wire send complete checksums.
func DisableTxChecksum(name, ifName string) error {
	return ns.WithNetNSPath(nsPath(name), func(ns.NetNS) error { return hns.DisableTxChecksum(ifName) })
}
