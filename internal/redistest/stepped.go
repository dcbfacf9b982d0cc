package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// SteppedClock is time that a test steps: a clockwork.Clock for the code
// under test and, for every server started with it (Options.Stepped), a
// wall clock frozen between steps that Advance moves with it. TIME, key
// expiry and uptime then read the same stepped time as the code under
// test, so a test of a wait of a minute takes as long as its steps' round
// trips. A server's monotonic clock stays real, so its event loop runs as
// usual.
//
// A step is one instant for both sides: a reading of the clock waits while
// a step is under way, so a request stamped before a step whose reply is
// stamped after it spans the step, and a server's reading in between
// falls within the two stamps whichever side of the step it is.
type SteppedClock struct {
	fake *clockwork.FakeClock

	mu      sync.RWMutex // written through a step
	servers []*steppedServer
}

// steppedServer is one server's stepped wall clock: its reading moves by
// rate times each step, and is written where libfaketime reads it on every
// call.
type steppedServer struct {
	file    string
	rate    float64
	reading time.Time
}

// NewSteppedClock returns a clock that reads start until stepped.
func NewSteppedClock(start time.Time) *SteppedClock {
	return &SteppedClock{fake: clockwork.NewFakeClockAt(start)}
}

// Advance moves the servers' clocks by d, each at its rate, and the fake
// clock, which fires the timers due by its new time.
func (c *SteppedClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.servers {
		s.reading = s.reading.Add(time.Duration(float64(d) * s.rate))
		if err := s.write(); err != nil {
			panic(fmt.Sprintf("redistest: step a server's clock: %v", err))
		}
	}
	c.fake.Advance(d)
}

func (c *SteppedClock) Now() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.fake.Now()
}

func (c *SteppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *SteppedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// The timers are the fake clock's: Advance fires them.

func (c *SteppedClock) After(d time.Duration) <-chan time.Time     { return c.fake.After(d) }
func (c *SteppedClock) Sleep(d time.Duration)                      { c.fake.Sleep(d) }
func (c *SteppedClock) NewTicker(d time.Duration) clockwork.Ticker { return c.fake.NewTicker(d) }
func (c *SteppedClock) NewTimer(d time.Duration) clockwork.Timer   { return c.fake.NewTimer(d) }
func (c *SteppedClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	return c.fake.AfterFunc(d, f)
}

// add gives a server started in dir a stepped clock that reads the fake
// clock's time, at rate 1, and returns the environment that makes it read
// it.
func (c *SteppedClock) add(dir string) (*steppedServer, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &steppedServer{file: filepath.Join(dir, "faketime"), rate: 1, reading: c.fake.Now()}
	if err := s.write(); err != nil {
		return nil, nil, err
	}
	env, err := fakeTimeEnv(
		"FAKETIME_TIMESTAMP_FILE="+s.file,
		// Read on every call, not every 10 s: a step must show at once.
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
		"TZ=UTC", // the file's time is UTC
	)
	if err != nil {
		return nil, nil, err
	}
	c.servers = append(c.servers, s)
	return s, env, nil
}

// setRate makes s's clock move by rate times each step from now on.
func (c *SteppedClock) setRate(s *steppedServer, rate float64) {
	c.mu.Lock()
	s.rate = rate
	c.mu.Unlock()
}

// write replaces the file whole, so that no read sees it half written.
func (s *steppedServer) write() error {
	tmp := s.file + ".new"
	// libfaketime's absolute form without "@" freezes the clock there.
	text := s.reading.UTC().Format("2006-01-02 15:04:05.000000") + "\n"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.file)
}

// stepOn puts the server's clock on c (StartWith).
func (s *Server) stepOn(c *SteppedClock) error {
	st, env, err := c.add(s.dir)
	if err != nil {
		return err
	}
	s.stepped, s.steps, s.env = st, c, env
	return nil
}
