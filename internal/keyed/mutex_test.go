package keyed

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestMutexSerialisesOneKeyOnly(t *testing.T) {
	g := NewWithT(t)
	var k Mutex
	var inA, maxA atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			defer k.Lock("a")()
			n := inA.Add(1)
			if n > maxA.Load() {
				maxA.Store(n)
			}
			time.Sleep(2 * time.Millisecond)
			inA.Add(-1)
		})
	}
	unlockA := k.Lock("a")
	done := make(chan struct{})
	go func() {
		defer k.Lock("b")()
		close(done)
	}()
	g.Eventually(done).Should(BeClosed(), "another key is not blocked")
	unlockA()
	wg.Wait()
	g.Expect(maxA.Load()).To(Equal(int32(1)))
	g.Expect(k.held()).To(BeZero(), "unused keys are dropped")
}
