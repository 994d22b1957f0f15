package pgjobs

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HeartbeatChunk and ListChunk are the chunk sizes, for the tests.
func HeartbeatChunk() int { return heartbeatChunk }
func ListChunk() int      { return listChunk }

// SetListChunk makes pages of n for the rest of t (t must not be parallel).
func SetListChunk(t testing.TB, n int) {
	old := listChunk
	listChunk = n
	t.Cleanup(func() { listChunk = old })
}

// SetCountChunk makes counting pages of n for the rest of t (t must not be
// parallel).
func SetCountChunk(t testing.TB, n int) {
	old := countChunk
	countChunk = n
	t.Cleanup(func() { countChunk = old })
}

// HeartbeatStatements counts the heartbeat statements r sent: those that
// extend leases whole (fast) and those that move jobs into new leases
// (slow).
func HeartbeatStatements(r *Registry) (fast, slow int64) {
	return r.fastStatements.Load(), r.slowStatements.Load()
}

// SetHeartbeatChunk makes leases of at most n jobs for the rest of t (t
// must not be parallel).
func SetHeartbeatChunk(t testing.TB, n int) {
	old := heartbeatChunk
	heartbeatChunk = n
	t.Cleanup(func() { heartbeatChunk = old })
}

// ForgetLeases empties r's cache of leases: its next heartbeat moves every
// job, and its next Tracks make new leases.
func ForgetLeases(r *Registry) {
	r.cache.mu.Lock()
	defer r.cache.mu.Unlock()
	clear(r.cache.leases)
	clear(r.cache.of)
	clear(r.cache.slots)
}

// SetAfterPlan makes r's heartbeats call f between their plan and their
// statements (set it before any heartbeat runs).
func SetAfterPlan(r *Registry, f func()) { r.afterPlan = f }

// SetTrackSlots makes the registries made after it, for the rest of t, join
// n open leases in turn (t must not be parallel).
func SetTrackSlots(t testing.TB, n int) {
	old := trackSlots
	trackSlots = n
	t.Cleanup(func() { trackSlots = old })
}

// SetBeforeTrack makes r's Tracks call f between their choice of lease
// and their statement (set it before any Track runs).
func SetBeforeTrack(r *Registry, f func()) { r.beforeTrack = f }

// SetAfterTrack makes r's Tracks call f with their statement's error, and
// go on with the error f returns (set it before any Track runs).
func SetAfterTrack(r *Registry, f func(error) error) { r.afterTrack = f }

// SetMovesOnly makes r's heartbeats move the jobs of no lease r knows at
// once, into new leases, without locating them and adopting the leases
// of other Registries (set it before any heartbeat runs).
func SetMovesOnly(r *Registry) { r.movesOnly = true }

// AdoptionStatements counts the heartbeat statements r sent that locate
// jobs and that extend the leases of other Registries.
func AdoptionStatements(r *Registry) (locate, adopt int64) {
	return r.locateStatements.Load(), r.adoptStatements.Load()
}

// SetAfterAdopt makes r's heartbeats call f once an adopting statement
// has answered, before they cache its leases (set it before any heartbeat
// runs).
func SetAfterAdopt(r *Registry, f func()) { r.afterAdopt = f }

// SetAdoptChunk makes statements that extend at most n leases of other
// Registries for the rest of t (t must not be parallel).
func SetAdoptChunk(t testing.TB, n int) {
	old := adoptChunk
	adoptChunk = n
	t.Cleanup(func() { adoptChunk = old })
}

// PipelineWithUnreadableRow sends the statements sqls (each returning a
// row) in one pipeline on conn, the row of the first one unreadable (its
// reader fails), and reports which were done and which failed.
func PipelineWithUnreadableRow(ctx context.Context, conn *pgx.Conn, sqls []string) (done []bool, errs []error) {
	done, errs = make([]bool, len(sqls)), make([]error, len(sqls))
	stmts := make([]statement, len(sqls))
	for i, q := range sqls {
		stmts[i] = statement{sql: q, formats: []int16{0},
			row: func([][]byte) error {
				if i == 0 {
					return errors.New("unreadable row")
				}
				return nil
			},
			done:   func() { done[i] = true },
			failed: func(err error) { errs[i] = err }}
	}
	_ = pipeline(ctx, conn, stmts)
	return done, errs
}
