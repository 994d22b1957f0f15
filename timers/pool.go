package timers

import (
	"sync"
	"sync/atomic"
	"time"
)

// poolIdle is how long a goroutine of a pool waits for its next function
// before it exits.
const poolIdle = 2 * time.Second

// pool runs a Scheduler's functions (an instant's claims and slots, a
// run) on goroutines that outlive them: a function goes to an idle
// goroutine of the pool when there is one, else to a new one, and a
// goroutine idle for poolIdle exits. A run's calls go deep (the slot
// lease, the backend's client, fn) and a new goroutine grows its stack
// for each of them (copying it each time): at 10,000 runs a second that
// was a tenth of the scheduler's CPU. A pooled goroutine keeps its grown
// stack from run to run. There is no bound: as many goroutines as
// functions running at once, as with a go statement each.
type pool struct {
	jobs    chan func() // unbuffered: a send succeeds only to an idle goroutine
	stop    chan struct{}
	workers sync.WaitGroup
	started atomic.Int64 // goroutines started, for tests
}

func newPool() *pool { return &pool{jobs: make(chan func()), stop: make(chan struct{})} }

// Go runs fn on a goroutine of the pool, counted in wg until fn returns.
func (p *pool) Go(wg *sync.WaitGroup, fn func()) {
	wg.Add(1)
	job := func() {
		defer wg.Done()
		fn()
	}
	select {
	case p.jobs <- job:
	default:
		p.started.Add(1)
		p.workers.Go(func() { p.work(job) })
	}
}

// work runs job, then the functions handed to it, until it has been idle
// for poolIdle or the pool is closed.
func (p *pool) work(job func()) {
	job()
	idle := time.NewTimer(poolIdle)
	defer idle.Stop()
	for {
		select {
		case job = <-p.jobs:
		case <-idle.C:
			return
		case <-p.stop:
			return
		}
		job()
		idle.Reset(poolIdle)
	}
}

// close ends the idle goroutines and waits until every goroutine of the
// pool has returned: call it once nothing more is handed to Go and every
// function handed to it has returned.
func (p *pool) close() {
	close(p.stop)
	p.workers.Wait()
}
