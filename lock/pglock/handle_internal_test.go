package pglock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// Lost, called on a handle already lost before anyone watched it, closes
// its channel through the same once as the loss does: Close, which
// abandons (ends with a loss) every grant of a snapshot taken before,
// closed it a second time and crashed the process (close of a closed
// channel) when such a handle, lost meanwhile on its own (a dead session
// found by Extend), was in its snapshot.
func TestLostOfALostHandleThenAbandoned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := NewFromDSN(ctx, testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, err := l.TryAcquire(ctx, "lost-then-abandoned/"+t.Name(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := g.(*handle)
	h.mu.Lock()
	h.markLost(errors.New("the session ended")) // as Extend does on a dead session, none watching
	h.mu.Unlock()
	select {
	case <-h.Lost():
	default:
		t.Fatal("Lost of a lost handle is not closed")
	}
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Close's abandon of the lost handle: %v", p)
		}
	}()
	h.abandon() // as Close does with its snapshot
}
