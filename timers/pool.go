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
	jobs    chan job // unbuffered: a send succeeds only to an idle goroutine
	stop    chan struct{}
	workers sync.WaitGroup
	started atomic.Int64 // goroutines started, for tests
}

func newPool() *pool { return &pool{jobs: make(chan job), stop: make(chan struct{})} }

// runner is what a pool runs: a run (*due), or any function (funcRunner).
type runner interface{ run() }

// funcRunner runs a function.
type funcRunner func()

func (f funcRunner) run() { f() }

// job is a runner and the WaitGroup that counts it, passed by value: a
// run costs no allocation of the pool's.
type job struct {
	r  runner
	wg *sync.WaitGroup
}

func (j job) do() {
	defer j.wg.Done()
	j.r.run()
}

// Go runs r on a goroutine of the pool, counted in wg until it returns.
func (p *pool) Go(wg *sync.WaitGroup, r runner) {
	wg.Add(1)
	j := job{r, wg}
	select {
	case p.jobs <- j:
	default:
		p.started.Add(1)
		p.workers.Go(func() { p.work(j) })
	}
}

// work runs j, then the jobs handed to it, until it has been idle for
// poolIdle or the pool is closed.
func (p *pool) work(j job) {
	j.do()
	idle := time.NewTimer(poolIdle)
	defer idle.Stop()
	for {
		select {
		case j = <-p.jobs:
		case <-idle.C:
			return
		case <-p.stop:
			return
		}
		j.do()
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
