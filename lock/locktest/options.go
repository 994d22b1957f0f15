package locktest

import "time"

type config struct {
	// eachRequests: requests per call of RunAcquireEach (0: acquireEachRequests)
	eachRequests int

	ttl       time.Duration
	minTTL    time.Duration
	roundsUp  bool
	slack     time.Duration
	rounds    int
	longTTL   time.Duration
	waitBound time.Duration
	// sessionLoss: a forced release ends a server session's grants (RunBatch)
	sessionLoss bool
	// releaseChunk: the backend's ReleaseEach chunk size (RunReleaseEach)
	releaseChunk int
}

func defaults() config {
	return config{
		ttl:       300 * time.Millisecond,
		slack:     time.Second,
		rounds:    10,
		longTTL:   30 * time.Second,
		waitBound: 10 * time.Second,
	}
}

// Option adapts the suite to a backend.
type Option func(*config)

// WithShortTTL sets the ttl of the tests that wait for a grant to expire
// (default 300 ms). It must be at least the backend's minimum.
func WithShortTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithMinTTL tells the suite the backend's smallest ttl. Unless WithRoundsUpTTL is
// given too, a ttl below it must be refused with ErrInvalidTTL.
func WithMinTTL(d time.Duration) Option { return func(c *config) { c.minTTL = d } }

// WithRoundsUpTTL says the backend rounds a ttl below its minimum up (and
// documents it) instead of refusing it.
func WithRoundsUpTTL() Option { return func(c *config) { c.roundsUp = true } }

// WithSlack says how much later than the ttl an abandoned key may become
// acquirable (default 1 s): the backend's stated expiry slack plus margin.
func WithSlack(d time.Duration) Option { return func(c *config) { c.slack = d } }

// WithRounds sets how many grants each of the 32 contending goroutines takes
// (default 10).
func WithRounds(n int) Option { return func(c *config) { c.rounds = n } }
