package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// BenchmarkSemaphore: acquire a permit (the release, the same for both, is
// not timed) of a 16-slot semaphore
// whose other slots are held, on each networked backend: this package (one
// round trip through MultiLock) beside the naive loop that tries slot 0, 1,
// ... in turn, with the free slot last — the worst case of the seed design.
func BenchmarkSemaphore(b *testing.B) {
	for _, kind := range backends.Networked(b) {
		be := kind(b)
		for _, held := range []int{0, 8, 15} {
			b.Run(fmt.Sprintf("%s/held=%d/design", be.Name, held), func(b *testing.B) {
				name := uniqueName(b)
				hold(b, be.New(b), name, held)
				sem := newSem(b, be.New(b), name, 16)
				ctx := context.Background()
				for b.Loop() {
					p, err := sem.TryAcquire(ctx, time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer() // the release is the same in both
					if err := p.Release(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
		b.Run(be.Name+"/held=15/naive-slot-loop", func(b *testing.B) {
			name := uniqueName(b)
			hold(b, be.New(b), name, 15)
			l := be.New(b)
			ctx := context.Background()
			for b.Loop() {
				var h lock.Handle
				for i := range 16 {
					var err error
					h, err = l.TryAcquire(ctx, semaphore.SlotKey(name, i), time.Minute)
					if err == nil {
						break
					}
					if !errors.Is(err, lock.ErrNotAcquired) {
						b.Fatal(err)
					}
				}
				if h == nil {
					b.Fatal("no free slot")
				}
				b.StopTimer()
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// hold takes slots 0 to n-1 of name for the benchmark.
func hold(b *testing.B, l lock.Lock, name string, n int) {
	for i := range n {
		h, err := l.TryAcquire(context.Background(), semaphore.SlotKey(name, i), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = h.Release(context.Background()) })
	}
}
