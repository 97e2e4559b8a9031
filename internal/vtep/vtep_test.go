package vtep

import (
	"testing"

	. "github.com/onsi/gomega"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

func TestMAC(t *testing.T) {
	g := NewWithT(t)
	a, b := Derived("node-a"), Derived("node-b")
	g.Expect(a.String()).To(Equal(Derived("node-a").String()), "stable")
	g.Expect(a.String()).NotTo(Equal(b.String()))
	for _, m := range [][]byte{a, b} {
		g.Expect(m[0]&0x01).To(BeZero(), "unicast")
		g.Expect(m[0]&0x02).NotTo(BeZero(), "locally administered")
	}
	g.Expect(MAC("node-a", networkv1alpha1.EncapsulationSpec{}).String()).To(Equal(a.String()))
	g.Expect(MAC("node-a", networkv1alpha1.EncapsulationSpec{VTEPMAC: "0e:00:00:00:00:01"}).String()).To(Equal("0e:00:00:00:00:01"))
}
