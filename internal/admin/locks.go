package admin

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// locksPage is the body of GET /locks: one page of a lock listing, as
// LOCK.LIST gives it. next_cursor is a string: a cursor is a uint64, which
// a JSON number read as a double (JavaScript's, jq's) would round.
type locksPage struct {
	NextCursor string     `json:"next_cursor"`
	Locks      []lockJSON `json:"locks"`
	// Skipped names the backends whose keys this page could not scan.
	Skipped []string `json:"skipped,omitempty"`
}

type lockJSON struct {
	Key        string         `json:"key"`
	Owner      *string        `json:"owner"` // null when no value has a quorum
	State      string         `json:"state"` // held, not_held or undecided
	ValidityMS int64          `json:"validity_ms"`
	Backends   []presenceJSON `json:"backends"`
}

type presenceJSON struct {
	Addr   string  `json:"addr"`
	Value  *string `json:"value"`   // null when absent, not a string, or not seen
	PTTLMS *int64  `json:"pttl_ms"` // -2 absent, -1 no expiry; null when not seen
	Error  string  `json:"error,omitempty"`
}

// lister lists the held locks: one engine, or every shard group's.
type lister interface {
	List(ctx context.Context, req quorum.List) (quorum.Listing, error)
}

// locksHandler serves GET /locks?cursor=&match=&count=&prefix=: a page of
// the lock listing (quorum.Engine.List) as JSON, for operators. It sees
// every key; prefix narrows the listing to the keys that start with it
// (a tenant's), match is a Redis glob on what follows the prefix, count
// is LOCK.LIST's COUNT. A malformed parameter is a 400 naming it.
func locksHandler(e lister) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		req := quorum.List{Prefix: q.Get("prefix"), Match: q.Get("match")}
		var err error
		if c := q.Get("cursor"); c != "" {
			if req.Cursor, err = strconv.ParseUint(c, 10, 64); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "cursor: not a cursor a listing gave: " + strconv.Quote(c)})
				return
			}
		}
		if c := q.Get("count"); c != "" {
			if req.Count, err = strconv.Atoi(c); err != nil || req.Count < 1 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "count: not a positive integer: " + strconv.Quote(c)})
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		page, err := e.List(ctx, req)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		body := locksPage{NextCursor: strconv.FormatUint(page.Cursor, 10), Locks: make([]lockJSON, 0, len(page.Locks)), Skipped: page.Skipped}
		for _, h := range page.Locks {
			l := lockJSON{Key: h.Key, State: h.State(), ValidityMS: h.PTTL()}
			if h.Owner != "" {
				l.Owner = &h.Owner
			}
			for _, b := range h.Backends {
				p := presenceJSON{Addr: b.Addr, Error: b.Kind()}
				if b.HasValue {
					p.Value = &b.Value
				}
				if ms, seen := b.PTTL(); seen {
					p.PTTLMS = &ms
				}
				l.Backends = append(l.Backends, p)
			}
			body.Locks = append(body.Locks, l)
		}
		writeJSON(w, http.StatusOK, body)
	})
}

// lockSample is what the status page shows of a listing's first page:
// the locks a quorum holds, those no quorum can decide, and what the
// listing could not see.
type lockSample struct {
	// Held are the locks a quorum holds (quorum.HeldLock.Held).
	Held []heldLockRow
	// Undecided are the keys where the backends that do not count could
	// change whether they are held (quorum.HeldLock.Undecided): no quorum
	// answers for them, as PTTL's NOQUORUM. Owner is "" and Tokens the
	// values the backends were seen holding; Present says which hold the
	// key at all.
	Undecided []heldLockRow
	// More says the listing goes on past the page: there may be more of
	// either.
	More bool
	// Skipped names the backends whose SCAN did not answer: the keys only
	// they hold are not listed.
	Skipped []string
	// Err is why the listing failed (its context ended); nil when it gave
	// a page.
	Err error
}

// heldSample lists, for the status page, the held and the undecided locks
// of the first page of a listing: one page, so that a view costs each
// backend a SCAN and a script whatever the number of locks.
func heldSample(e lister) func(context.Context) lockSample {
	return func(ctx context.Context) lockSample {
		page, err := e.List(ctx, quorum.List{Count: statusLocks + 1})
		if err != nil {
			return lockSample{Err: err}
		}
		s := lockSample{More: page.Cursor != 0, Skipped: page.Skipped}
		for _, h := range page.Locks {
			row := heldLockRow{Key: h.Key, Owner: h.Owner, Left: h.Validity, Present: make([]bool, len(h.Backends)), Addrs: make([]string, len(h.Backends))}
			for i, b := range h.Backends {
				row.Addrs[i] = b.Addr
				switch {
				case h.Undecided:
					row.Present[i] = b.Exists
					if b.HasValue && !slices.Contains(row.Tokens, b.Value) {
						row.Tokens = append(row.Tokens, b.Value)
					}
				default:
					row.Present[i] = b.HasValue && b.Value == h.Owner
				}
			}
			switch {
			case h.Undecided:
				row.Owner, row.Left = "", 0
				s.Undecided = append(s.Undecided, row)
			case h.Held:
				s.Held = append(s.Held, row)
			}
		}
		return s
	}
}
