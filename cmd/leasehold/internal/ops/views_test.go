package ops

import (
	"reflect"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// A key's shares become one row: their count, their distinct owners, and
// the share that expires first; exclusive grants and groups pass as they are.
func TestFoldShares(t *testing.T) {
	gs := []lock.Grant{
		{Key: "a", Owner: "host-a", Token: 3, Remaining: 10 * time.Second, Group: "g1"},
		{Key: "cfg", Owner: "host-a", Token: 5, Remaining: 20 * time.Second, Shared: true},
		{Key: "cfg", Owner: "host-b", Token: 6, Remaining: 5 * time.Second, Shared: true},
		{Key: "cfg", Owner: "host-a", Token: 7, Remaining: 30 * time.Second, Shared: true},
		{Key: "z", Owner: "host-c", Token: 1, Remaining: time.Second},
	}
	got := foldShares(gs)
	want := []Grant{
		{Key: "a", Owner: "host-a", Token: 3, RemainingMS: 10000, Group: "g1"},
		{Key: "cfg", Owner: "host-b", Token: 6, RemainingMS: 5000, Shares: 3, Owners: []string{"host-a", "host-b"}},
		{Key: "z", Owner: "host-c", Token: 1, RemainingMS: 1000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("foldShares:\n got %+v\nwant %+v", got, want)
	}
	if h := got[1].Holder(); h != "3 shared: host-a, host-b" {
		t.Fatalf("Holder of the shares = %q", h)
	}
	if h := got[0].Holder(); h != "host-a" {
		t.Fatalf("Holder of an exclusive grant = %q", h)
	}
}
