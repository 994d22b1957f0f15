package stacks_test

import (
	"strings"
	"testing"

	"github.com/leasehold-go/leasehold/internal/stacks"
)

func TestAllSeesANewGoroutine(t *testing.T) {
	before := stacks.All()
	stop, started := make(chan struct{}), make(chan struct{})
	go parked(started, stop)
	<-started
	defer close(stop)
	var found []string
	for id, g := range stacks.All() {
		if _, ok := before[id]; !ok {
			found = append(found, g)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "stacks_test.parked(") {
		t.Fatalf("new goroutines %q, want the one running parked", found)
	}
}

func parked(started, stop chan struct{}) {
	close(started)
	<-stop
}
