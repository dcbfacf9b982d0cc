package backend

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestPipeGreetsThenAnswers: a new connection's greeting tells Admit what
// server it reached, before the first request gets its reply; after
// Close, requests fail without being sent.
func TestPipeGreetsThenAnswers(t *testing.T) {
	srv := redistest.Start(t)
	script := NewScript("return redis.call('PING')")
	greetings := make(chan Greeting, 1)
	p, err := New(Config{
		URL:      srv.URL(),
		Timeout:  time.Second,
		Scripts:  []*Script{script},
		Commands: []string{"PEXPIRETIME", "NOSUCHCOMMAND"},
		Admit:    func(g Greeting) error { greetings <- g; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st, _ := p.Status(); st != StatusIdle {
		t.Fatalf("status before any request: %d, want idle", st)
	}
	r, err := p.Do(t.Context(), ScriptCommand(script, nil))
	if s, serr := r.Status(); err != nil || serr != nil || s != "PONG" {
		t.Fatalf("script: %+v, %v", r, err)
	}
	g := <-greetings
	if g.RunID == "" || g.Version == "" || g.InfoErr != nil || g.LoadErr != nil ||
		!maps.Equal(g.Known, map[string]bool{"PEXPIRETIME": true, "NOSUCHCOMMAND": false}) {
		t.Errorf("greeting: %+v", g)
	}
	if st, err := p.Status(); st != StatusUp || err != nil {
		t.Errorf("status after a request: %d, %v; want up", st, err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := p.Do(t.Context(), NewCommand("PING")); !WasNotSent(err) {
		t.Errorf("PING after Close: %v; want an error that says it was not sent", err)
	}
}

// TestPipeAdmitRefuses: a connection Admit refuses carries no request:
// each fails, unsent, with Admit's error, and the Pipe is down with it.
func TestPipeAdmitRefuses(t *testing.T) {
	srv := redistest.Start(t)
	refusal := errors.New("not this one")
	states := make(chan bool, 1)
	p, err := New(Config{
		URL:     srv.URL(),
		Timeout: time.Second,
		Admit:   func(Greeting) error { return refusal },
		Refused: func(err error) bool { return errors.Is(err, refusal) },
		OnState: func(up bool, _ error) { states <- up },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 2 {
		if _, err := p.Do(t.Context(), NewCommand("PING")); !errors.Is(err, refusal) || !WasNotSent(err) {
			t.Fatalf("PING: %v; want the refusal, unsent", err)
		}
	}
	if up := <-states; up {
		t.Error("OnState heard of a connection")
	}
	if st, err := p.Status(); st != StatusDown || !errors.Is(err, refusal) {
		t.Errorf("status: %d, %v; want down with the refusal", st, err)
	}
}
