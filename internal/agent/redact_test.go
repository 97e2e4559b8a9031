package agent

import (
	"testing"

	. "github.com/onsi/gomega"
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
	} {
		out := string(Redact([]byte(tc.in)))
		g.Expect(out).NotTo(ContainSubstring(tc.gone), tc.in)
		g.Expect(out).To(ContainSubstring(tc.kept), tc.in)
		g.Expect(out).To(ContainSubstring("[REDACTED"), tc.in)
	}
	g.Expect(string(Redact([]byte("table=0 priority=200 cookie=0x1 match: ipv4_src=10.0.0.1")))).To(Equal("table=0 priority=200 cookie=0x1 match: ipv4_src=10.0.0.1"))
}
