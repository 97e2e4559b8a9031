package cni

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
)

func TestValidateContainerID(t *testing.T) {
	for _, tc := range []struct {
		id  string
		msg string // empty: valid
	}{
		{"0123456789abcdef", ""},
		{strings.Repeat("a", MaxContainerIDLength), ""},
		{"console", ""}, // only the exact device names are reserved
		{"nul1", ""},
		{"", "missing"},
		{"..", "invalid characters"},
		{"a/../b", "invalid characters"},
		{`a\b`, "invalid characters"},
		{"C:x", "invalid characters"},
		{strings.Repeat("a", MaxContainerIDLength+1), "more than winnet's limit of 128"},
		{"CON", "Windows device name"},
		{"nul", "Windows device name"},
		{"Lpt9", "Windows device name"},
		{"com1.json", "Windows device name"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			g := NewWithT(t)
			err := ValidateContainerID("CNI_CONTAINERID", tc.id)
			if tc.msg == "" {
				g.Expect(err).To(BeNil())
				return
			}
			g.Expect(err).NotTo(BeNil())
			g.Expect(err.Code).To(BeEquivalentTo(types.ErrInvalidEnvironmentVariables))
			g.Expect(err.Msg).To(ContainSubstring(tc.msg))
		})
	}
}

func TestConfigTooLarge(t *testing.T) {
	g := NewWithT(t)
	err := ConfigTooLarge(MaxConfigSize + 1)
	g.Expect(err.Code).To(BeEquivalentTo(types.ErrInvalidNetworkConfig))
	g.Expect(err.Msg).To(ContainSubstring("limit of 4194304 bytes (4 MiB)"))
}
