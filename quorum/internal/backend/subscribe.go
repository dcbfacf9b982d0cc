package backend

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// URL, TLS and Timeout are as in Config: where the server is, how to
	// reach it, and how long a dial (with AUTH and SELECT) may take, which
	// is also how long the Subscriber waits before dialling again after
	// losing the connection.
	URL     string
	TLS     *tls.Config
	Timeout time.Duration
	// Message is called with each message published on a subscribed
	// channel (pattern ""), or on a channel that matches a subscribed
	// pattern (once per pattern it matches), from the Subscriber's
	// goroutine, in the order the server sent them. It must not block.
	Message func(pattern, channel, payload string)
	// Subscribed is called, from the Subscriber's goroutine, when the
	// server confirms a subscription to channel, or to a pattern (after
	// each dial, for every one wanted then). It must not block. Default:
	// none.
	Subscribed func(channelOrPattern string)
}

// A Subscriber is one subscribed-mode connection to a server, carrying
// the channels asked of it, and dialled again when lost, with every
// channel still wanted: messages published while it was down are lost, as
// pub/sub loses them. It is safe for concurrent use.
type Subscriber struct {
	opt *redis.Options
	cfg SubscriberConfig

	mu       sync.Mutex
	wanted   map[string]bool // channels
	patterns map[string]bool
	rw       *bufio.ReadWriter // nil while not connected
	nc       net.Conn
	closed   bool

	done    context.Context
	stop    context.CancelFunc
	running sync.WaitGroup
}

// NewSubscriber returns a Subscriber to the server cfg.URL names, which
// dials at once and keeps dialling until Close. It fails only on a bad
// URL.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	opt, err := options(cfg.URL, cfg.TLS)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{opt: opt, cfg: cfg, wanted: map[string]bool{}, patterns: map[string]bool{}}
	s.done, s.stop = context.WithCancel(context.Background())
	s.running.Add(1)
	go s.loop()
	return s, nil
}

// Subscribe adds channels; Subscribed hears when the server has them.
func (s *Subscriber) Subscribe(channels ...string) { s.change("SUBSCRIBE", s.wanted, true, channels) }

// Unsubscribe drops channels.
func (s *Subscriber) Unsubscribe(channels ...string) {
	s.change("UNSUBSCRIBE", s.wanted, false, channels)
}

// PSubscribe adds patterns (Redis's glob); Subscribed hears when the
// server has them.
func (s *Subscriber) PSubscribe(patterns ...string) {
	s.change("PSUBSCRIBE", s.patterns, true, patterns)
}

// PUnsubscribe drops patterns.
func (s *Subscriber) PUnsubscribe(patterns ...string) {
	s.change("PUNSUBSCRIBE", s.patterns, false, patterns)
}

// change adds or drops names in set (s.wanted or s.patterns), telling the
// server with verb.
func (s *Subscriber) change(verb string, set map[string]bool, want bool, names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var news []any
	for _, ch := range names {
		if set[ch] != want {
			news = append(news, ch)
		}
		if want {
			set[ch] = true
		} else {
			delete(set, ch)
		}
	}
	if len(news) == 0 || s.rw == nil {
		return // a dial subscribes to everything wanted then
	}
	// Under the lock, so that the server sees the changes in order. A
	// write that fails breaks the connection, which the reader sees.
	s.nc.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	s.rw.Write(KeylessCommand(verb, news...).wire)
	s.rw.Flush()
}

// Close ends the connection and the dialling.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	nc := s.nc
	s.mu.Unlock()
	s.stop()
	if nc != nil {
		nc.Close()
	}
	s.running.Wait()
	return nil
}

// loop dials, subscribes to what is wanted and reads messages until the
// connection breaks, then again after Timeout, until Close.
func (s *Subscriber) loop() {
	defer s.running.Done()
	for s.done.Err() == nil {
		nc, rw, err := dial(s.done, s.opt, s.cfg.Timeout, func(rw *bufio.ReadWriter) error { return authenticate(rw, s.opt) })
		if err == nil {
			s.read(nc, rw)
		}
		select {
		case <-s.done.Done():
		case <-time.After(s.cfg.Timeout):
		}
	}
}

// read serves one connection until it breaks.
func (s *Subscriber) read(nc net.Conn, rw *bufio.ReadWriter) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.nc, s.rw = nc, rw
	// A PING first, so that a server that takes no channel yet still
	// answers something this reader understands; then everything wanted.
	rw.Write(KeylessCommand("PING").wire)
	for verb, set := range map[string]map[string]bool{"SUBSCRIBE": s.wanted, "PSUBSCRIBE": s.patterns} {
		if len(set) == 0 {
			continue
		}
		var args []any
		for ch := range set {
			args = append(args, ch)
		}
		rw.Write(KeylessCommand(verb, args...).wire)
	}
	nc.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	err := rw.Flush()
	s.mu.Unlock()
	for err == nil {
		var r Reply
		if r, err = readReply(rw.Reader); err != nil {
			break
		}
		s.deliver(r)
	}
	s.mu.Lock()
	s.nc, s.rw = nil, nil
	s.mu.Unlock()
	nc.Close()
}

// deliver reads one frame of subscribed mode: a message, or the
// confirmation of a subscription.
func (s *Subscriber) deliver(r Reply) {
	a, err := r.Array()
	if err != nil || len(a) < 3 {
		return // PONG, or what a newer server adds
	}
	kind, _ := a[0].Bulk()
	channel, _ := a[1].Bulk()
	switch {
	case kind == "message":
		payload, _ := a[2].Bulk()
		s.cfg.Message("", channel, payload)
	case kind == "pmessage" && len(a) == 4:
		pattern := channel
		channel, _ = a[2].Bulk()
		payload, _ := a[3].Bulk()
		s.cfg.Message(pattern, channel, payload)
	case kind == "subscribe", kind == "psubscribe":
		if s.cfg.Subscribed != nil {
			s.cfg.Subscribed(channel)
		}
	}
}
