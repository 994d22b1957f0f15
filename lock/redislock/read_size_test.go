package redislock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// serverRead is what Redis 7.0 reads of a client's input in one pass of
// its event loop (PROTO_IOBUF_LEN): a script whose command is longer runs
// whole in the pass that completes it, while every other client waits.
const serverRead = 16 * 1024

// scriptSizes records the size of each script command a client sends, as
// the server receives it (RESP).
type scriptSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (s *scriptSizes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptSizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.add(cmd)
		return next(ctx, cmd)
	}
}
func (s *scriptSizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (s *scriptSizes) add(cmd redis.Cmder) {
	if !strings.HasPrefix(strings.ToUpper(cmd.Name()), "EVAL") {
		return
	}
	args := cmd.Args()
	n := len("*\r\n") + len(strconv.Itoa(len(args)))
	for _, a := range args {
		var v string
		switch a := a.(type) {
		case *string:
			v = *a
		case *int64:
			v = strconv.FormatInt(*a, 10)
		default:
			v = fmt.Sprint(a)
		}
		n += len("$\r\n\r\n") + len(strconv.Itoa(len(v))) + len(v)
	}
	s.mu.Lock()
	s.sizes = append(s.sizes, n)
	s.mu.Unlock()
}

func (s *scriptSizes) take() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sizes
	s.sizes = nil
	return out
}

// checkFitsOneRead checks that the scripts of a batch were each shorter
// than one read of the server, so that a pass of the server runs at most
// about a read's worth of them, and that there were several.
func checkFitsOneRead(t *testing.T, what string, sizes []int) {
	t.Helper()
	if len(sizes) < 2 {
		t.Fatalf("%s: %d scripts, want several", what, len(sizes))
	}
	longest := 0
	for i, n := range sizes {
		longest = max(longest, n)
		if n >= serverRead {
			t.Errorf("%s: script %d of %d is %d bytes, not less than the server's read of a client (%d)", what, i, len(sizes), n, serverRead)
		}
	}
	t.Logf("%s: %d scripts, the longest %d bytes", what, len(sizes), longest)
}

// timerKey is a key as long as a timer's claim key, or its slot key
// ("timer/<name>/tick/<instant ms>"), with a name of 30 bytes.
func timerKey(prefix string, i int) string {
	return fmt.Sprintf("timer/%s/%08d/tick/1764000000000", prefix[len(prefix)-12:], i)
}

// The scripts of a ClaimEach of a timer's many ticks are each shorter than
// one read of the server (a chunk of 250 claims was 52 KB: a pass ran it
// whole, about 1.5 ms).
func TestClaimEachScriptsFitOneRead(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	rec := &scriptSizes{}
	c.AddHook(rec)
	l := newLock(t, c)
	prefix := runID(t)
	reqs := make([]lock.ClaimRequest, 1000)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Key: timerKey(prefix, i), TTL: 1500 * time.Millisecond}
	}
	l.ClaimEach(t.Context(), reqs[:1]) // the script loaded: EVALSHA only
	rec.take()
	for i, r := range l.ClaimEach(t.Context(), reqs[1:]) {
		if r.Err != nil {
			t.Fatalf("claim %d: %v", i+1, r.Err)
		}
	}
	checkFitsOneRead(t, "999 claims", rec.take())
}

// The scripts of a ReleaseEach of many grants are each shorter than one
// read of the server (a chunk of 200 grants was 94 KB: a pass ran it
// whole, about 1 ms).
func TestReleaseEachScriptsFitOneRead(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	rec := &scriptSizes{}
	c.AddHook(rec)
	l := newLock(t, c)
	ctx := t.Context()
	prefix := runID(t)
	hs := make([]lock.Handle, 1000)
	for i := range hs {
		h, err := l.TryAcquire(ctx, timerKey(prefix, i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	l.ReleaseEach(ctx, hs[:1]) // the script loaded: EVALSHA only
	rec.take()
	for i, err := range l.ReleaseEach(ctx, hs[1:]) {
		if err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	checkFitsOneRead(t, "999 releases", rec.take())
}
