//go:build !windows

package hns

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

func TestNewIsUnsupportedOffWindows(t *testing.T) {
	g := NewWithT(t)
	c, err := New(Options{})
	g.Expect(c).To(BeNil())
	g.Expect(errors.Is(err, errors.ErrUnsupported)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring("only on Windows"))
}
