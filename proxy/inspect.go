package proxy

import (
	"context"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/quorum"
	"github.com/lockproxy/lockproxy/shard"
	"github.com/tidwall/redcon"
)

// Lister is what LOCK.LIST, SCAN, KEYS, DBSIZE and FLUSHDB need of the
// lock engine: a page of a listing of the keys held (shard.Groups.List).
type Lister interface {
	// List returns one page of a listing of the keys held, owners and
	// validities as the engine computes them. It fails only when ctx ends.
	List(ctx context.Context, req quorum.List) (quorum.Listing, error)
}

var (
	_ Lister = (*shard.Groups)(nil)
	_ Lister = (*keyspace)(nil)
)

// List lists only the keys under the user's prefix, MATCH applying to
// what follows it, and shows them without it, as every other reply does;
// database 0's leaves out the other databases' keys.
func (k *keyspace) List(ctx context.Context, req quorum.List) (quorum.Listing, error) {
	return k.list(ctx, req, k.db != 0)
}

// list is List, with the other databases' keys too where all is set
// (FLUSHALL's listing of database 0).
func (k *keyspace) list(ctx context.Context, req quorum.List, all bool) (quorum.Listing, error) {
	if k.err != nil {
		return quorum.Listing{}, k.err
	}
	req.Prefix = k.prefix + req.Prefix
	page, err := k.lister.List(ctx, req)
	kept := page.Locks[:0]
	for _, l := range page.Locks {
		l.Key = strings.TrimPrefix(l.Key, k.prefix)
		if all || !strings.HasPrefix(l.Key, dbMarkerStart) {
			kept = append(kept, l)
		}
	}
	page.Locks = kept
	return page, err
}

// listRequest is LOCK.LIST's or SCAN's arguments.
type listRequest struct {
	quorum.List
	typ string // SCAN's TYPE, lower case; "" when not given
}

// parseList parses cursor [MATCH pattern] [COUNT n], and with scan [TYPE
// type], as Redis parses SCAN's.
func parseList(args [][]byte, scan bool) (listRequest, error) {
	var req listRequest
	cursor, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		return req, errorf("ERR invalid cursor")
	}
	req.Cursor = cursor
	for i := 2; i < len(args); i += 2 {
		if i+1 == len(args) {
			return req, errSyntax
		}
		val := args[i+1]
		switch opt := strings.ToLower(string(args[i])); {
		case opt == "match":
			req.Match = string(val)
		case opt == "count":
			n, ok := parseInt(val)
			if !ok {
				return req, errNotInteger
			}
			if n < 1 {
				return req, errSyntax
			}
			req.Count = int(min(n, quorum.MaxListCount))
		case opt == "type" && scan:
			req.typ = strings.ToLower(string(val))
		default:
			return req, errSyntax
		}
	}
	return req, nil
}

// handleLockList serves LOCK.LIST cursor [MATCH pattern] [COUNT n]: a page
// of the locks held, as SCAN pages keys: [next cursor, [lock ...]], each
// lock a map (a flat array in RESP2) of key, owner, validity_ms, state and
// backends, each backend a map of addr, value, pttl_ms and error.
func (s *Server) handleLockList(conn redcon.Conn, cmd redcon.Command) {
	_, page, ok := s.listPage(conn, cmd, false)
	if !ok {
		return
	}
	conn.WriteArray(len(page.Locks))
	for _, h := range page.Locks {
		writeHeldLock(conn, h)
	}
}

// listPage parses LOCK.LIST's or (with scan) SCAN's arguments, lists a
// page, and writes the reply's start: its two elements' array and the next
// cursor. On a failure it writes the error reply instead, and returns false.
func (s *Server) listPage(conn redcon.Conn, cmd redcon.Command, scan bool) (listRequest, quorum.Listing, bool) {
	req, err := parseList(cmd.Args, scan)
	var page quorum.Listing
	if err == nil {
		page, err = space(conn).List(s.ctx, req.List)
	}
	if err != nil {
		s.writeError(conn, err)
		return req, page, false
	}
	conn.WriteArray(2)
	conn.WriteBulkString(strconv.FormatUint(page.Cursor, 10))
	return req, page, true
}

func writeHeldLock(conn redcon.Conn, h quorum.HeldLock) {
	writeMapLen(conn, 5)
	conn.WriteBulkString("key")
	conn.WriteBulkString(h.Key)
	conn.WriteBulkString("owner")
	if h.Owner == "" {
		writeNull(conn)
	} else {
		conn.WriteBulkString(h.Owner)
	}
	conn.WriteBulkString("validity_ms")
	conn.WriteInt64(h.PTTL())
	conn.WriteBulkString("state")
	conn.WriteBulkString(h.State())
	conn.WriteBulkString("backends")
	conn.WriteArray(len(h.Backends))
	for _, b := range h.Backends {
		writeMapLen(conn, 4)
		conn.WriteBulkString("addr")
		conn.WriteBulkString(b.Addr)
		conn.WriteBulkString("value")
		if b.HasValue {
			conn.WriteBulkString(b.Value)
		} else {
			writeNull(conn)
		}
		conn.WriteBulkString("pttl_ms")
		if ms, seen := b.PTTL(); seen {
			conn.WriteInt64(ms)
		} else {
			writeNull(conn)
		}
		conn.WriteBulkString("error")
		conn.WriteBulkString(b.Kind())
	}
}

// handleScan serves SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]: the
// keys of a LOCK.LIST page that are held (a quorum holds a value with time
// left), so that redis-cli --scan works. Every lock is a string: TYPE
// anything else lists nothing.
func (s *Server) handleScan(conn redcon.Conn, cmd redcon.Command) {
	req, page, ok := s.listPage(conn, cmd, true)
	if !ok {
		return
	}
	var keys []string
	for _, h := range page.Locks {
		if h.Held && (req.typ == "" || req.typ == "string") {
			keys = append(keys, h.Key)
		}
	}
	conn.WriteArray(len(keys))
	for _, k := range keys {
		conn.WriteBulkString(k)
	}
}

// handleKeys serves KEYS pattern: the keys a quorum holds that match, as
// SCAN lists them, every page of the listing in one reply. Like KEYS on
// Redis it is for tests and debugging: each page is a SCAN and a read on
// every backend.
func (s *Server) handleKeys(conn redcon.Conn, cmd redcon.Command) {
	keys, err := walk(s.ctx, space(conn), string(cmd.Args[1]), false, true)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	conn.WriteArray(len(keys))
	for _, k := range keys {
		conn.WriteBulkString(k)
	}
}

// handleDBSize serves DBSIZE: how many keys KEYS * would answer.
func (s *Server) handleDBSize(conn redcon.Conn, _ redcon.Command) {
	keys, err := walk(s.ctx, space(conn), "*", false, true)
	if err != nil {
		s.writeError(conn, err)
		return
	}
	conn.WriteInt(len(keys))
}

// handleFlush serves FLUSHDB and FLUSHALL [ASYNC|SYNC]: every key of the
// caller's key space that any backend holds (FLUSHDB: of its database;
// FLUSHALL: of all of them) is deleted through the quorum, as DEL does,
// where the configuration allows it (test suites' teardowns).
func (s *Server) handleFlush(conn redcon.Conn, cmd redcon.Command) {
	name := strings.ToLower(string(cmd.Args[0]))
	if len(cmd.Args) > 2 {
		s.writeError(conn, errSyntax)
		return
	}
	if len(cmd.Args) == 2 {
		if mode := strings.ToUpper(string(cmd.Args[1])); mode != "ASYNC" && mode != "SYNC" {
			s.writeError(conn, errSyntax)
			return
		}
	}
	if !s.embedded && !s.settings().cfg.AllowFlush {
		s.writeError(conn, errorf("ERR %s is off: set allow_flush = true to let it delete every lock of the caller's key space", strings.ToUpper(name)))
		return
	}
	ks := space(conn)
	all := name == "flushall"
	if all {
		ks = ks.dbs[0]
	}
	if _, err := deleteAll(s.ctx, ks, "*", all); err != nil {
		s.writeError(conn, err)
		return
	}
	conn.WriteString("OK")
}

// deleteAll deletes through the quorum, as DEL does, every key of ks that
// matches match and any backend has (with all, the other databases' keys
// too, ks being database 0's), and returns how many there were.
func deleteAll(ctx context.Context, ks *keyspace, match string, all bool) (int, error) {
	keys, err := walk(ctx, ks, match, all, false)
	for _, k := range keys {
		if err != nil {
			break
		}
		in, key := ks, k
		if all {
			db, name := splitDB(k)
			in, key = ks.dbs[db], name
		}
		_, err = in.Write(ctx, quorum.Write{Op: quorum.OpDelete, Key: key})
	}
	return len(keys), err
}

// walk lists every key of ks that matches match, page after page: those a
// quorum holds, or with held false every key any backend has; with all,
// the other databases' keys too (ks being database 0's).
func walk(ctx context.Context, ks *keyspace, match string, all, held bool) ([]string, error) {
	seen := map[string]bool{}
	var keys []string
	req := quorum.List{Match: match, Count: quorum.MaxListCount}
	for {
		page, err := ks.list(ctx, req, all)
		if err != nil {
			return nil, err
		}
		for _, l := range page.Locks {
			if (l.Held || !held) && !seen[l.Key] {
				seen[l.Key] = true
				keys = append(keys, l.Key)
			}
		}
		// A listing that does not move on (no SCAN's does) ends too.
		if page.Cursor == 0 || page.Cursor == req.Cursor {
			return keys, nil
		}
		req.Cursor = page.Cursor
	}
}
