package agent

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb/vswitchd"
)

// TestRedact: keys and certificates (PEM, also escaped in JSON and base64 as kubeconfig holds them),
// tokens, bearer credentials and the values of secret-named keys are replaced; the rest is kept.
func TestRedact(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct{ in, gone, kept string }{
		{"-----BEGIN PRIVATE KEY-----\nMIIkeymaterial\n-----END PRIVATE KEY-----\nnext", "MIIkeymaterial", "next"},
		{`{"a":"-----BEGIN CERTIFICATE-----\nMIIcertmaterial\n-----END CERTIFICATE-----","b":1}`, "MIIcertmaterial", `"b":1`},
		{"client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=\nserver: https://x", "LS0tLS1CRUdJTiBSU0E", "server: https://x"},
		{"msg eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl end", "c2lnbmF0dXJl", "end"},
		{"Authorization: Bearer abcdefghijklmnop0123", "abcdefghijklmnop0123", "Authorization"},
		{`{"token":"opaque-value-123","node":"a"}`, "opaque-value-123", `"node":"a"`},
		{"password=hunter2hunter2 host=x", "hunter2hunter2", "host=x"},
		{`{"clientKey": "plain", "private_key":"pk-123"}`, "pk-123", `"clientKey": "plain"`},
		{"MIIcutbyatail\n-----END RSA PRIVATE KEY-----\nnext line", "MIIcutbyatail", "next line"},
		{"last line\n-----BEGIN EC PRIVATE KEY-----\nMIIcutbytheend", "MIIcutbytheend", "last line"},
		// OVS IPsec and other credentials, in text (a log line, ovs-vsctl's output): the tunnel's VNIs stay.
		{`options:psk=swordfish-psk options:key=5001`, "swordfish-psk", "options:key=5001"},
		{`{"PSK": "swordfish-2", "in_key": "5002", "out_key": "5003"}`, "swordfish-2", `"in_key": "5002", "out_key": "5003"`},
		{`remote_cert="/etc/ipsec.d/certs/peer.pem" remote_ip=10.0.0.2`, "peer.pem", "remote_ip=10.0.0.2"},
		{`{"credentials":"c-123","dst_port":"4789"}`, "c-123", `"dst_port":"4789"`},
		{`passwd: p-456 csum: true`, "p-456", "csum: true"},
	} {
		out := string(Redact([]byte(tc.in)))
		g.Expect(out).NotTo(ContainSubstring(tc.gone), tc.in)
		g.Expect(out).To(ContainSubstring(tc.kept), tc.in)
		g.Expect(out).To(ContainSubstring("[REDACTED"), tc.in)
	}
	g.Expect(string(Redact([]byte("table=0 priority=200 cookie=0x1 match: ipv4_src=10.0.0.1")))).To(Equal("table=0 priority=200 cookie=0x1 match: ipv4_src=10.0.0.1"))
}

// TestSecretKey: the keys whose values the bundle redacts, in any case, and those it keeps: the
// tunnel's key, in_key and out_key (VNIs) and the other keys a maintainer reads.
func TestSecretKey(t *testing.T) {
	for _, tc := range []struct {
		key    string
		secret bool
	}{
		{"psk", true},
		{"PSK", true},
		{"ipsec_psk", true},
		{"password", true},
		{"db-Password", true},
		{"passwd", true},
		{"secret", true},
		{"client_secret", true},
		{"token", true},
		{"bearerToken", true},
		{"credential", true},
		{"credentials", true},
		{"certificate", true},
		{"remote_cert", true},
		{"ca_cert", true},
		{"private_key", true},
		{"privateKey", true},
		{"client-key-data", true},
		{"api_key", true},
		{"key", false},
		{"in_key", false},
		{"out_key", false},
		{"KEY", false},
		{"remote_ip", false},
		{"local_ip", false},
		{"dst_port", false},
		{"csum", false},
		{"tos", false},
		{"ttl", false},
		{"remote_name", false},
		{"iface-id", false},
		{"attached-mac", false},
		{"hwaddr", false},
		{"datapath-id", false},
		{"flow-restore-wait", false},
		{"winnet-owner", false},
	} {
		if got := secretKey(tc.key); got != tc.secret {
			t.Errorf("secretKey(%q) = %v, want %v", tc.key, got, tc.secret)
		}
	}
}

// TestOVSDBJSONRedactsMapsByKey: the bundle's OVSDB member redacts the secret keys of every map of its
// rows (an IPsec tunnel's options, a bridge's other_config, external IDs), whatever the key looks like,
// keeps the tunnel's VNIs and every other key, and leaves the rows it was given (the client's cache) alone.
func TestOVSDBJSONRedactsMapsByKey(t *testing.T) {
	g := NewWithT(t)
	options := map[string]string{"remote_ip": "10.0.0.2", "key": "5001", "in_key": "5002", "out_key": "5003",
		"psk": "swordfish-psk", "remote_cert": "cert-body", "private_key": "pk-body", "odd psk name": "spaced-secret"}
	s := ovsdb.Snapshot{
		Bridges: []vswitchd.Bridge{{Name: "br-int",
			OtherConfig: map[string]string{"hwaddr": "00:11:22:33:44:55", "Password": "bridge-pass"}}},
		Ports: []vswitchd.Port{{Name: "tun0", ExternalIDs: map[string]string{"winnet-owner": "winnet", "api_token": "port-token"}}},
		Interfaces: []vswitchd.Interface{{Name: "tun0", Type: "gre", Options: options,
			OtherConfig: map[string]string{"credential": "if-cred"}, ExternalIDs: map[string]string{"iface-id": "pod-a"}}},
	}
	data, err := ovsdbJSON(s)
	g.Expect(err).NotTo(HaveOccurred())
	out := string(Redact(data)) // as the bundle writes it
	for _, gone := range []string{"swordfish-psk", "cert-body", "pk-body", "spaced-secret", "bridge-pass", "port-token", "if-cred"} {
		g.Expect(out).NotTo(ContainSubstring(gone), out)
	}
	for _, kept := range []string{`"key": "5001"`, `"in_key": "5002"`, `"out_key": "5003"`, `"remote_ip": "10.0.0.2"`,
		`"hwaddr": "00:11:22:33:44:55"`, `"winnet-owner": "winnet"`, `"iface-id": "pod-a"`, `"odd psk name": "[REDACTED]"`} {
		g.Expect(out).To(ContainSubstring(kept), out)
	}
	g.Expect(options["psk"]).To(Equal("swordfish-psk"), "the rows given are left alone")
	g.Expect(s.Bridges[0].OtherConfig["Password"]).To(Equal("bridge-pass"), "the rows given are left alone")
}
