package proxy

import (
	"strings"

	"github.com/tidwall/redcon"
)

// A client that pipelines lock commands (redis-py and go-redis pipelines,
// ioredis auto-pipelining) sends many before reading any reply. Each one's
// quorum round trip would otherwise wait for the previous one's. When the
// commands ahead in the pipeline touch keys no other of them touches, and
// change nothing but their keys, their order cannot be observed: they run
// at once, and their replies are still written in order.

// maxConcurrentPipeline bounds the commands of one connection run at once.
const maxConcurrentPipeline = 128

// early is a command started ahead of its turn, and its reply once done.
type early struct {
	raw   *byte // identifies the command: the first byte of cmd.Raw
	done  chan struct{}
	reply []byte
}

// startAhead starts the commands pipelined behind cmd that can run now,
// together with cmd, which the caller then serves itself. It is called
// only with cmd admitted (authenticated, begun).
func (s *Server) startAhead(conn redcon.Conn, cmd redcon.Command, c *command) {
	ahead := conn.PeekPipeline()
	if len(ahead) == 0 || !c.concurrent {
		return
	}
	st := state(conn)
	if st.tx != nil {
		// A GET of a watched key must record what it read in this
		// connection's state, in order: no command runs ahead of its turn
		// while a transaction is under way.
		return
	}
	if len(st.early) > 0 {
		return // already started from an earlier command of this pipeline
	}
	keys := map[string]struct{}{}
	if !s.claimKeys(conn, keys, c, cmd.Args) {
		return
	}
	for _, next := range ahead[:min(len(ahead), maxConcurrentPipeline-1)] {
		nc, err := s.lookup(next.Args)
		if err != nil || !nc.concurrent || s.crossSlot(nc, next.Args) != nil || s.takesSession(conn, nc.name, next.Args) ||
			!s.claimKeys(conn, keys, nc, next.Args) || !s.begin() {
			break
		}
		e := &early{raw: &next.Raw[0], done: make(chan struct{})}
		st.early = append(st.early, e)
		// Its own copy of the connection's state: a HELLO later in the
		// pipeline must not change the protocol of an earlier reply.
		rec := &replyBuffer{delegate: delegate{conn}, state: *st}
		rec.state.early = nil
		go func() {
			defer close(e.done)
			nc.run(rec, next)
			e.reply = rec.out
		}()
	}
}

// finishAhead writes the reply of cmd if it was started ahead, and reports
// whether it was. The command counts as in flight for Shutdown until then,
// so that its reply is flushed before the connection is closed.
func (s *Server) finishAhead(conn redcon.Conn, cmd redcon.Command) bool {
	st := state(conn)
	if len(st.early) == 0 || st.early[0].raw != &cmd.Raw[0] {
		return false
	}
	e := st.early[0]
	st.early[0] = nil
	if st.early = st.early[1:]; len(st.early) == 0 {
		st.early = nil
	}
	<-e.done
	conn.WriteRaw(e.reply)
	s.end(conn)
	return true
}

// claimKeys adds the keys of a command to keys and reports whether none was
// there already, nor unknown. An EVALSHA counts only when its script is
// cached already: an EVAL ahead of it may be what caches it.
func (s *Server) claimKeys(conn redcon.Conn, keys map[string]struct{}, c *command, args [][]byte) bool {
	var own [][]byte
	switch c.name {
	case "exists", "del", "unlink":
		own = args[1:]
	case "evalsha":
		if space(conn).scripts.get(strings.ToLower(string(args[1]))) == nil {
			return false
		}
		fallthrough
	case "eval":
		req, err := parseEval(args)
		if err != nil {
			return false
		}
		return claim(keys, req.keys...)
	default:
		own = args[1:2]
	}
	for _, k := range own {
		if !claim(keys, string(k)) {
			return false
		}
	}
	return true
}

// claim adds own to keys and reports whether none of them was there.
func claim(keys map[string]struct{}, own ...string) bool {
	for _, k := range own {
		if _, taken := keys[k]; taken {
			return false
		}
		keys[k] = struct{}{}
	}
	return true
}

// replyBuffer is a connection whose replies are kept instead of sent; the
// rest (state, address) is the client's connection's.
type replyBuffer struct {
	delegate
	replies
	state connState
}

var _ redcon.Conn = (*replyBuffer)(nil)

// delegate puts a redcon.Conn's methods one level down in replyBuffer, so
// that the Write methods promoted are those of replies.
type delegate struct{ redcon.Conn }

func (r *replyBuffer) Context() any     { return &r.state }
func (r *replyBuffer) SetContext(v any) {} // lock commands change no state

// dropAhead waits for the commands started ahead of their turn that will not
// get it (the connection was closed in the middle of its batch) and ends
// them, so that Shutdown does not wait for them for ever. Their replies are
// dropped.
func (s *Server) dropAhead(conn redcon.Conn) {
	st := state(conn)
	for _, e := range st.early {
		<-e.done
		s.inflight.Done()
	}
	st.early = nil
}
