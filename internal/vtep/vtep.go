package vtep

import (
	"crypto/sha256"
	"net"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// MAC is the node's VTEP MAC: spec.encapsulation.vtepMAC when set, else Derived(nodeName). winnet-agent
// delivers it on the fast path and winnet-controller publishes it for flannel; both call this.
func MAC(nodeName string, enc networkv1alpha1.EncapsulationSpec) net.HardwareAddr {
	if enc.VTEPMAC != "" {
		if mac, err := net.ParseMAC(string(enc.VTEPMAC)); err == nil {
			return mac
		}
	}
	return Derived(nodeName)
}

// Derived is a locally administered unicast MAC made of the first 46 bits of the SHA-256 of the node's name:
// stable across restarts and reboots, and different for different names but with a chance of about n²/2^47
// among n nodes (1 in 5,000 at 10,000 nodes); a collision shows as two nodes publishing one MAC, and
// spec.encapsulation.vtepMAC sets another.
func Derived(nodeName string) net.HardwareAddr {
	sum := sha256.Sum256([]byte(nodeName))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}
