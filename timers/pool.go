package timers

import (
	"sync"
	"sync/atomic"
	"time"
)

// poolIdle is the period of a pool's trimming: a goroutine idle for a
// whole period exits at its end (so after poolIdle to 2 × poolIdle idle).
const poolIdle = 2 * time.Second

// pool runs a Scheduler's functions (an instant's claims and slots, a
// run) on goroutines that outlive them: a function goes to an idle
// goroutine of the pool when there is one, else to a new one. A run's
// calls go deep (the slot lease, the backend's client, fn) and a new
// goroutine grows its stack for each of them (copying it each time): at
// 10,000 runs a second that was a tenth of the scheduler's CPU. A pooled
// goroutine keeps its grown stack from run to run. There is no bound: as
// many goroutines as functions running at once, as with a go statement
// each. An idle goroutine waits on two channels and no timer (a timer in
// its select was armed and disarmed at every run: 8% of the scheduler's
// CPU at 10,000 runs a second); one trimming goroutine ends, every
// poolIdle, as many idle goroutines as were idle throughout the period.
type pool struct {
	jobs    chan job      // unbuffered: a send succeeds only to an idle goroutine
	quit    chan struct{} // a receive ends an idle goroutine; closed by close
	stop    chan struct{} // ends the trimming
	trimmed chan struct{} // closed when the trimming has returned
	workers sync.WaitGroup
	started atomic.Int64 // goroutines started, for tests

	idle atomic.Int64 // goroutines waiting for a function
	low  atomic.Int64 // the fewest idle since the period began
}

func newPool() *pool {
	p := &pool{jobs: make(chan job), quit: make(chan struct{}), stop: make(chan struct{}), trimmed: make(chan struct{})}
	go p.trim()
	return p
}

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
		// The goroutine that took it is no longer idle.
		n := p.idle.Add(-1)
		for lo := p.low.Load(); n < lo && !p.low.CompareAndSwap(lo, n); lo = p.low.Load() {
		}
	default:
		p.started.Add(1)
		p.workers.Go(func() { p.work(j) })
	}
}

// work runs j, then the jobs handed to it, until it is trimmed or the pool
// is closed.
func (p *pool) work(j job) {
	for {
		j.do()
		p.idle.Add(1)
		select {
		case j = <-p.jobs: // Go counted it out of the idle ones
		case <-p.quit:
			p.idle.Add(-1)
			return
		}
	}
}

// trim ends, every poolIdle, as many idle goroutines as were idle all
// through the period, until close.
func (p *pool) trim() {
	defer close(p.trimmed)
	t := time.NewTicker(poolIdle)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		n := p.low.Swap(p.idle.Load())
		for ; n > 0; n-- {
			select {
			case p.quit <- struct{}{}:
			default: // none idle any more
				n = 0
			}
		}
	}
}

// close ends the idle goroutines and waits until every goroutine of the
// pool has returned: call it once nothing more is handed to Go and every
// function handed to it has returned.
func (p *pool) close() {
	close(p.stop)
	<-p.trimmed
	close(p.quit)
	p.workers.Wait()
}
