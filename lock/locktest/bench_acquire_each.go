package locktest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// BenchAcquireEach measures taking one key of each of n pools of size
// keys (each pool's keys share a hash tag, as a semaphore's slots do):
// lock.TryAcquireAnyEach on l ("each": natively on a lock.AnyEachAcquirer),
// the generic path of lock.TryAcquireAnyEach, 16 TryAcquireAny at once
// ("generic"), and n TryAcquireAny one after the other ("sequential"). One
// op is the n requests; the grants are released between ops, off the
// clock. l must be a lock.MultiLock.
func BenchAcquireEach(b *testing.B, l lock.Lock, n, keys int) {
	m, ok := l.(lock.MultiLock)
	if !ok {
		b.Fatalf("%T is not a lock.MultiLock", l)
	}
	id := randomID()
	reqs := make([]lock.AnyRequest, n)
	for i := range reqs {
		reqs[i] = lock.AnyRequest{Keys: make([]string, keys), TTL: 30 * time.Second}
		for j := range keys {
			reqs[i].Keys[j] = fmt.Sprintf("locktest/each/%s/{%d}/%d", id, i, j)
		}
	}
	run := func(b *testing.B, take func(ctx context.Context) []lock.Handle) {
		ctx := context.Background()
		for b.Loop() {
			hs := take(ctx)
			b.StopTimer()
			for _, h := range hs {
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/request")
	}
	handles := func(b *testing.B, res []lock.AnyResult) []lock.Handle {
		hs := make([]lock.Handle, len(res))
		for i, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			hs[i] = r.Handle
		}
		return hs
	}
	b.Run("each", func(b *testing.B) {
		run(b, func(ctx context.Context) []lock.Handle { return handles(b, lock.TryAcquireAnyEach(ctx, l, reqs)) })
	})
	b.Run("generic", func(b *testing.B) {
		generic := multiOnly{m, l}
		run(b, func(ctx context.Context) []lock.Handle { return handles(b, lock.TryAcquireAnyEach(ctx, generic, reqs)) })
	})
	b.Run("sequential", func(b *testing.B) {
		run(b, func(ctx context.Context) []lock.Handle {
			hs := make([]lock.Handle, len(reqs))
			for i, r := range reqs {
				h, err := m.TryAcquireAny(ctx, r.Keys, r.TTL)
				if err != nil {
					b.Fatal(err)
				}
				hs[i] = h
			}
			return hs
		})
	})
}

// multiOnly is a Lock whose only capability is MultiLock.
type multiOnly struct {
	lock.MultiLock
	l lock.Lock
}

func (m multiOnly) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return m.l.TryAcquire(ctx, key, ttl)
}
