package nodenetwork

import (
	"fmt"
	"net"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestDesiredNodePassesWindowsProfile builds the node's tunnel port and base flows from the spec, as
// the reconciler does, for every encapsulation mode (VXLAN, Geneve on a custom port, flannel's VXLAN
// VNI 4096 on 4789, Hybrid, NoEncap) with SNAT on and off, and holds them against the Windows
// datapath profile.
func TestDesiredNodePassesWindowsProfile(t *testing.T) {
	mac, _ := net.ParseMAC("00:15:5d:01:02:03")
	gwMAC, _ := net.ParseMAC("02:42:0a:f4:01:01")
	f := facts{uplinkName: "Ethernet 2", uplinkMAC: mac, uplinkMTU: 1500, nodePodCIDRs: []string{"10.244.1.0/24"}}
	modes := map[string]networkv1alpha1.EncapsulationSpec{
		"vxlan":          {Mode: networkv1alpha1.EncapsulationModeEncap, TunnelType: networkv1alpha1.TunnelTypeVXLAN, VNI: 1},
		"geneve":         {Mode: networkv1alpha1.EncapsulationModeEncap, TunnelType: networkv1alpha1.TunnelTypeGeneve, VNI: 1, Port: 7081},
		"flannel":        {Mode: networkv1alpha1.EncapsulationModeEncap, TunnelType: networkv1alpha1.TunnelTypeVXLAN, VNI: 4096, Port: 4789},
		"hybrid":         {Mode: networkv1alpha1.EncapsulationModeHybrid, TunnelType: networkv1alpha1.TunnelTypeVXLAN, VNI: 1},
		"noencap":        {Mode: networkv1alpha1.EncapsulationModeNoEncap},
		"geneve-mtu1400": {Mode: networkv1alpha1.EncapsulationModeEncap, TunnelType: networkv1alpha1.TunnelTypeGeneve, VNI: 5000, MTU: 1400},
	}
	for name, enc := range modes {
		for _, snat := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s,snat=%v", name, snat), func(t *testing.T) {
				g := NewWithT(t)
				spec := baseSpec()
				spec.Encapsulation = enc
				spec.SNAT.Enabled = ptr.To(snat)
				d, err := desiredState(spec, f)
				g.Expect(err).NotTo(HaveOccurred())
				ofports := map[string]int32{d.gatewayPort.Name: GatewayOFPort, d.uplink.Name: UplinkOFPort}
				dp := pipeline.Datapath{}
				if d.tunnel != nil {
					ofports[d.tunnel.Name] = TunnelOFPort
					dp.Tunnels = append(dp.Tunnels, pipeline.TunnelPort{Type: string(d.tunnel.Type), Options: d.tunnel.Options})
				} else {
					g.Expect(name).To(Equal("noencap"))
				}
				n := d.pipelineNode(gwMAC, ofports)
				dp.Flows, dp.NATZones = n.BaseFlows(), n.NATZones()
				g.Expect(pipeline.CheckWindows(dp)).To(BeEmpty())
			})
		}
	}
}
