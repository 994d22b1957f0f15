package locktest

import "time"

type config struct {
	ttl       time.Duration
	minTTL    time.Duration
	roundsUp  bool
	slack     time.Duration
	rounds    int
	longTTL   time.Duration
	waitBound time.Duration
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

// ShortTTL sets the ttl of the tests that wait for a grant to expire
// (default 300 ms). It must be at least the backend's minimum.
func ShortTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// MinTTL tells the suite the backend's smallest ttl. Unless RoundsUpTTL is
// given too, a ttl below it must be refused with ErrInvalidTTL.
func MinTTL(d time.Duration) Option { return func(c *config) { c.minTTL = d } }

// RoundsUpTTL says the backend rounds a ttl below its minimum up (and
// documents it) instead of refusing it.
func RoundsUpTTL() Option { return func(c *config) { c.roundsUp = true } }

// Slack is how much later than the ttl an abandoned key may become
// acquirable (default 1 s): the backend's stated expiry slack plus margin.
func Slack(d time.Duration) Option { return func(c *config) { c.slack = d } }

// Rounds sets how many grants each of the 32 contending goroutines takes
// (default 10).
func Rounds(n int) Option { return func(c *config) { c.rounds = n } }
