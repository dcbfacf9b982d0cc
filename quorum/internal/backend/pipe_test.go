package backend

import (
	"errors"
	"maps"
	"strings"
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
	if _, err := p.Do(t.Context(), KeylessCommand("PING")); !WasNotSent(err) {
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
		if _, err := p.Do(t.Context(), KeylessCommand("PING")); !errors.Is(err, refusal) || !WasNotSent(err) {
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

// TestPipeBatchThenLone: a request with nothing in flight is written by
// its sender; one made while another's reply is owed goes in the next
// batch, which the Pipe's reader writes once that reply is in;
// a lone request long after (past the stall limit that bounds that
// write) is written by its sender and answered: no deadline of the
// batch's write is left to fail it.
func TestPipeBatchThenLone(t *testing.T) {
	srv := redistest.Start(t)
	p, err := New(Config{URL: srv.URL(), Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Do(t.Context(), KeylessCommand("PING")); err != nil {
		t.Fatal(err) // connected
	}
	// The server is busy for 20 ms, within the stall limit: the PING
	// sent meanwhile waits for the script's reply, and goes in a batch of
	// its own.
	busy := "local t = redis.call('TIME') repeat local n = redis.call('TIME') until (n[1] - t[1]) * 1000000 + n[2] - t[2] > 20000"
	blocked := make(waiter, 1)
	lone := p.Queue(&Request{To: blocked, Cmd: ScriptCommand(NewScript(busy), nil)})
	if lone.c == nil {
		t.Fatal("a request with nothing in flight was not left to its sender to write")
	}
	batched := make(waiter, 1)
	if behind := p.Queue(&Request{To: batched, Cmd: KeylessCommand("PING")}); behind.c != nil {
		t.Fatal("a request made while a reply is owed was left to its sender to write")
	}
	lone.Write()
	if o := <-blocked; o.err != nil {
		t.Fatalf("the busy script: %v", o.err)
	}
	if o := <-batched; o.err != nil {
		t.Fatalf("the batched PING: %v", o.err)
	}
	time.Sleep(3 * p.stallLimit()) // time passing is the point, not a wait for something
	for i := range 3 {
		if r, err := p.Do(t.Context(), KeylessCommand("PING")); err != nil {
			t.Fatalf("lone PING %d after the batch: %v", i, err)
		} else if s, _ := r.Status(); s != "PONG" {
			t.Fatalf("lone PING %d: %+v", i, r)
		}
	}
}

// TestPipeLoadsScriptsOnFirstUse: a connection loads at its greeting only
// Config.Scripts; any other script is loaded when a request first runs it
// there, in the same write and ahead of it, so that it never answers
// NOSCRIPT and nothing queued behind it runs before it. A server then
// holds only the scripts its clients run. After SCRIPT FLUSH the request
// is sent once more with its source, and answered.
func TestPipeLoadsScriptsOnFirstUse(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	greeted := NewScript("return 'greeted'")
	set := NewScript("return redis.call('SET', KEYS[1], ARGV[1])")
	p, err := New(Config{URL: srv.URL(), Timeout: time.Second, Scripts: []*Script{greeted}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Do(t.Context(), KeylessCommand("PING")); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// The first run of set, and a GET of its key queued behind it: the
	// GET must see what the script wrote.
	first, behind := make(waiter, 1), make(waiter, 1)
	w := p.Queue(&Request{To: first, Cmd: ScriptCommand(set, []string{"k"}, "v")})
	p.Queue(&Request{To: behind, Cmd: KeyCommand("GET", "k")}).Write()
	w.Write()
	if o := <-first; o.err != nil {
		t.Fatalf("the script's first run: %v", o.err)
	}
	if o := <-behind; o.err != nil || o.reply.str != "v" {
		t.Fatalf("GET queued behind the script's first run: %+v; want v", o)
	}
	for range 2 {
		if _, err := p.Do(t.Context(), ScriptCommand(set, []string{"k"}, "w")); err != nil {
			t.Fatal(err)
		}
	}
	stats := rdb.Info(t.Context(), "commandstats", "memory").Val()
	for _, want := range []string{"cmdstat_script|load:calls=1,", "cmdstat_evalsha:calls=3,", "number_of_cached_scripts:2\r"} {
		if !strings.Contains(stats, want) {
			t.Errorf("server's INFO lacks %q: one load of the script, three runs by SHA, and the greeted script beside it:\n%s", want, stats)
		}
	}
	if strings.Contains(stats, "cmdstat_eval:") {
		t.Errorf("a run was sent again with its source (it answered NOSCRIPT):\n%s", stats)
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Do(t.Context(), ScriptCommand(set, []string{"k"}, "x")); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
	}
	if v := rdb.Get(t.Context(), "k").Val(); v != "x" {
		t.Errorf("after SCRIPT FLUSH the script was not run: k is %q", v)
	}
}
