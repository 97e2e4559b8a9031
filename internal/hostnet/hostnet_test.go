package hostnet

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

func TestRouteMatches(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	actual := Route{Dst: p("10.244.1.0/24"), Gateway: a("192.168.1.11"), LinkIndex: 7, Metric: 10, Owned: true}
	tests := []struct {
		name    string
		desired Route
		want    bool
	}{
		{name: "identical", desired: actual, want: true},
		{name: "any interface", desired: Route{Dst: p("10.244.1.0/24"), Gateway: a("192.168.1.11"), Metric: 10}, want: true},
		{name: "ownership is not compared", desired: Route{Dst: p("10.244.1.0/24"), Gateway: a("192.168.1.11"), LinkIndex: 7, Metric: 10}, want: true},
		{name: "other interface", desired: Route{Dst: p("10.244.1.0/24"), Gateway: a("192.168.1.11"), LinkIndex: 8, Metric: 10}},
		{name: "other gateway", desired: Route{Dst: p("10.244.1.0/24"), Gateway: a("192.168.1.12"), Metric: 10}},
		{name: "on-link instead of via a gateway", desired: Route{Dst: p("10.244.1.0/24"), Metric: 10}},
		{name: "other metric", desired: Route{Dst: p("10.244.1.0/24"), Gateway: a("192.168.1.11"), Metric: 11}},
		{name: "other prefix length", desired: Route{Dst: p("10.244.1.0/25"), Gateway: a("192.168.1.11"), Metric: 10}},
		{name: "unmasked destination, once normalized", desired: Route{Dst: p("10.244.1.9/24"), Gateway: a("192.168.1.11"), Metric: 10}.normalize(), want: true},
		{name: "IPv4-mapped addresses, once normalized", desired: Route{Dst: p("::ffff:10.244.1.0/120"), Gateway: a("::ffff:192.168.1.11"), Metric: 10}.normalize(), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(routeMatches(tt.desired, actual)).To(Equal(tt.want))
		})
	}
}

func TestRouteValidate(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	tests := []struct {
		name    string
		route   Route
		wantErr string
	}{
		{name: "valid", route: Route{Dst: p("0.0.0.0/0"), Gateway: a("10.0.0.1")}},
		{name: "valid IPv6 on-link", route: Route{Dst: p("fd00::/64")}},
		{name: "no destination", route: Route{Gateway: a("10.0.0.1")}, wantErr: "invalid destination"},
		{name: "mixed families", route: Route{Dst: p("fd00::/64"), Gateway: a("10.0.0.1")}, wantErr: "different IP families"},
		{name: "negative metric", route: Route{Dst: p("10.0.0.0/8"), Metric: -1}, wantErr: "negative metric"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tt.route.validate()
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}

func TestMovable(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{addr: "192.168.1.10/24", want: true},
		{addr: "10.0.0.5/8", want: true},
		{addr: "2001:db8::10/64", want: true},
		{addr: "fd00::1/64", want: true},
		{addr: "169.254.12.1/16"},
		{addr: "fe80::1/64"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Movable(netip.MustParsePrefix(tt.addr))).To(Equal(tt.want))
		})
	}
}
