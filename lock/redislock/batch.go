package redislock

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	//go:embed renew_batch.lua
	renewBatchSrc    string
	renewBatchScript = rediscall.NewScript(renewBatchSrc)
)

var _ lock.Batcher = (*Lock)(nil)

// NewBatch implements lock.Batcher: a Batch whose grants are made for ttl
// and renewed together. It sends nothing: on Redis grants share nothing
// on the server, and the batch is only a way to renew many at once.
//
// Renew renews any exclusive grant of this Lock (made by the batch or
// not): it sends one script per chunk of at most 1,000 keys (on a Cluster
// the keys of a chunk share a hash slot; keys of many slots make a chunk
// per slot), all of them in one pipeline, so that a Renew costs one round
// trip of wall time (one per master, sent together, on a Cluster) and no
// call blocks the server for more than a chunk's work. Each key is renewed
// only if it still holds the handle's grant, as Extend checks, and each
// handle's ValidUntil moves on as Extend's would. Under WithReplicaAcks one
// WAIT follows each master's scripts; a renewal it did not acknowledge is
// reported unknown (lock.ErrUnavailable). A share (TryAcquireShared) is not
// renewed by a batch: its outcome is an error matching
// lock.ErrInvalidArgument, and it is extended alone (Extend). Close marks
// the batch closed; its grants stay until released or expired.
func (l *Lock) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return nil, err
	}
	return &batch{l: l, ttl: ttl, ttlArg: ms(ttl)}, nil
}

// batch is a lock.Batch of a Lock.
type batch struct {
	l      *Lock
	ttl    time.Duration
	ttlArg any // ttl in ms, boxed once

	mu     sync.Mutex
	closed bool
}

func (b *batch) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func (b *batch) closedErr() error {
	return backendkit.Invalid("redislock", "batch closed")
}

// TryAcquire implements lock.Batch: TryAcquire of key for the batch's ttl.
func (b *batch) TryAcquire(ctx context.Context, key string) (lock.Handle, error) {
	if b.isClosed() {
		return nil, b.closedErr()
	}
	return b.l.TryAcquire(ctx, key, b.ttl)
}

// Close implements lock.Batch. The grants stay until released or expired.
func (b *batch) Close(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// Renew implements lock.Batch (see NewBatch).
func (b *batch) Renew(ctx context.Context, hs []lock.Handle) []error {
	errs := make([]error, len(hs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := backendkit.CheckContext(ctx); err != nil {
		return fail(err)
	}
	if b.isClosed() {
		return fail(b.closedErr())
	}
	own := make([]*handle, 0, len(hs))
	at := make([]int, 0, len(hs)) // of hs, for own
	for i, h := range hs {
		hd, ok := h.(*handle)
		switch {
		case !ok || hd.l != b.l:
			errs[i] = backendkit.Invalid("redislock", "Renew of a handle (%T) that is not of this Lock", h)
		case hd.shared():
			errs[i] = backendkit.Invalid("redislock", "Renew of a share of %q: a share is extended alone (Extend)", hd.key)
		case hd.isReleased():
			errs[i] = hd.lost("renew after release")
		default:
			own = append(own, hd)
			at = append(at, i)
		}
	}
	order, ends := b.l.chunks(len(own), renewChunk, func(i int) string { return own[i].keys[0] })
	calls := make([]scriptCall, len(ends))
	start := 0
	for c, end := range ends {
		n := end - start
		call := renewBatchScript.Start(make([]any, 0, 3+2*n+1), n)
		for _, i := range order[start:end] {
			call = append(call, &own[i].keys[0])
		}
		call = append(call, b.ttlArg)
		for _, i := range order[start:end] {
			call = append(call, &own[i].value)
		}
		calls[c] = scriptCall{Script: renewBatchScript, Args: call}
		start = end
	}
	sent := time.Now()
	b.l.pipeline(ctx, calls, true)
	start = 0
	for c, end := range ends {
		part := order[start:end]
		gone, err := goneOf(calls[c].Cmd, len(part))
		for j, i := range part {
			h := own[i]
			errs[at[i]] = h.extendedIf("redislock: renew", sent, b.ttl, err, gone[j], calls[c].Acked, func() error { return h.lost("renew") })
		}
		start = end
	}
	return errs
}

// goneOf reads renew_batch.lua's reply to a chunk of n keys: which are gone.
func goneOf(cmd *redis.Cmd, n int) ([]bool, error) {
	gone := make([]bool, n)
	res, err := cmd.Slice()
	if err != nil {
		return gone, err
	}
	for _, r := range res {
		j, ok := r.(int64)
		if !ok || j < 1 || j > int64(n) {
			return gone, fmt.Errorf("unexpected reply %v", res)
		}
		gone[j-1] = true
	}
	return gone, nil
}

// chunks orders n items, whose Redis keys are key(i), into the chunks of
// a pipeline: order lists the items chunk after chunk, and chunk c ends at
// ends[c]. A chunk has at most size items, all of one hash slot on a
// Cluster (of one hash tag on a Ring, whose shards hash the tag); on a
// single server (or failover client) the items are chunked in their order.
func (l *Lock) chunks(n, size int, key func(int) string) (order, ends []int) {
	order = make([]int, n)
	for i := range order {
		order[i] = i
	}
	switch l.client.(type) {
	case *redis.ClusterClient:
		slots := make([]uint16, n)
		for i := range slots {
			slots[i] = keySlot(key(i))
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(slots[a], slots[b]) })
		return order, appendEnds(nil, order, size, func(a, b int) bool { return slots[a] == slots[b] })
	case *redis.Ring:
		tags := make([]string, n)
		for i := range tags {
			tags[i] = hashTag(key(i))
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(tags[a], tags[b]) })
		return order, appendEnds(nil, order, size, func(a, b int) bool { return tags[a] == tags[b] })
	}
	return order, appendEnds(nil, order, size, func(a, b int) bool { return true })
}

// appendEnds appends to ends the ends of the chunks of order: a new one
// after size items or where an item may not share its predecessor's.
func appendEnds(ends, order []int, size int, same func(a, b int) bool) []int {
	for i := range order {
		if i > 0 && (i-lastOf(ends) == size || !same(order[i-1], order[i])) {
			ends = append(ends, i)
		}
	}
	if len(order) > 0 {
		ends = append(ends, len(order))
	}
	return ends
}

func lastOf(ends []int) int {
	if len(ends) == 0 {
		return 0
	}
	return ends[len(ends)-1]
}

// keySlot is the Redis Cluster hash slot of a key: CRC16 (XMODEM) of its
// hash tag (hashTag), or of the whole key without one, modulo 16384.
func keySlot(key string) uint16 {
	if tag := hashTag(key); tag != "" {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
