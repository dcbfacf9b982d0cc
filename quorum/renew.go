package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// Held is a lock a token holds, to renew.
type Held struct {
	Key   string
	Token string
	// Prefix is, for a read hold (Renewal.Read), the prefix of its
	// timeout keys (Redisson's "{name}"), as OpReadAcquire's Keys[1].
	Prefix string
}

// Renewed is one lock's outcome in a Renew.
type Renewed struct {
	// Validity is how long the lock is now safe to rely on, counted from the
	// start of the Renew, as Lock's Result.Validity is; > 0 when Err is nil.
	Validity time.Duration
	// Err is nil when the lock was renewed on a quorum with validity left;
	// ErrNotHeld when the backends that answered leave no quorum that could
	// hold it (the lock is lost: it was rolled back, as a refused OpExtend is);
	// a *NoQuorumError (errors.Is(err, ErrNoQuorum)) when undecided (not rolled
	// back: it may still be held); ErrReservedKey for a reserved key.
	Err error
}

// maxRenewBatch is the most locks one script call renews. A script blocks
// its backend while it runs, about 1 µs a lock, so a batch holds up the
// backend's other clients for about 100 µs; that is what Redisson's lock
// watchdog costs them too, renewing 100 keys per EVAL. Larger batches
// would save little more: the round trip is already shared by 100.
const maxRenewBatch = 100

// Renewal asks to renew many locks in one call, each to TTL where its
// token still holds it: locks whose value is the token, or with Hash, hash
// locks (Redisson's RLock, hashlock.go) whose Token is the owner's field in
// the hash Key.
type Renewal struct {
	Locks []Held
	TTL   time.Duration
	Hash  bool
	// Read renews read holds of read-write locks (rwlock.go): Token the
	// owner, Prefix its timeout keys' prefix. Each is renewed where the
	// owner's reader field is, its timeout keys with it.
	Read bool
}

// Renew sets the TTL of each lock to req.TTL on every backend where its
// token still holds its key, as Lock with OpExtend does for one, and
// returns the outcomes in the order of req.Locks. The locks go in batches
// of up to maxRenewBatch, each one script call per backend, all batches at
// once. Each lock is decided by the Redlock rule (rule.go) on its own
// votes; its validity is the TTL less drift and the time from its batch's
// start to its quorum-th yes. A backend that fails or does not answer in
// time is silent for every lock of its batch. A TTL outside (0, MaxTTL]
// gives every lock a *TTLError, and nothing is sent. ctx bounds the wait
// for votes, as for every request (ops.go).
//
// A lock refused (ErrNotHeld) is rolled back on every backend, as a
// refused extension is: where a backend renewed it, before Renew returns
// (within a backend timeout). An undecided one is not rolled back. A hash
// lock is renewed on a backend where the hash has its owner's field, and a
// refused one is not rolled back anywhere: Redisson's watchdog, told so,
// stops renewing and lets the lease run out. Deleting it could not be
// aimed at the lapsed hold alone: a hash lock's field is the same for
// every hold of its owner, who may be taking the lock again, or hold it
// nested, on the backends that still have it, and what decides that is
// its own acquisition and release. A field that starts with a NUL byte,
// where the engine keeps its own (hashlock.go), is refused with
// ErrReservedKey, unsent.
func (e *Engine) Renew(ctx context.Context, req Renewal) []Renewed {
	if req.Read {
		return e.renewReads(ctx, req.TTL, req.Locks)
	}
	r := renewScript{script: e.values.renewEach, decode: decodeRenewed}
	if req.Hash {
		r = renewScript{script: hashRenewEachScript, decode: decodeRenewedCounts, fields: true}
	}
	return e.renew(ctx, req.TTL, req.Locks, r)
}

func (e *Engine) renew(ctx context.Context, ttl time.Duration, locks []Held, r renewScript) []Renewed {
	out := make([]Renewed, len(locks))
	if err := e.checkTTL(ttl); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	sendable := make([]int, 0, len(locks)) // positions in locks
	for i, l := range locks {
		if reserved(l.Key, l.Prefix) || r.fields && reservedField(l.Token) {
			out[i].Err = ErrReservedKey
			continue
		}
		sendable = append(sendable, i)
	}
	var wg sync.WaitGroup
	for batch := range slices.Chunk(sendable, maxRenewBatch) {
		wg.Go(func() { e.renewBatch(ctx, ttl, locks, batch, out, r) })
	}
	wg.Wait()
	return out
}

// renewScript is what a batch renewal runs on each backend, and what its
// locks are.
type renewScript struct {
	script *backend.Script
	// decode reads the script's answer for a batch of n locks.
	decode func(n int) func(*node, backend.Reply) (renewAnswer, error)
	// fields: the locks are hash locks, their tokens owners' fields
	// (Renewal.Hash). A refused one is not rolled back; otherwise it is, as
	// a refused extension is.
	fields bool
	// reads: the locks are read holds of read-write locks (Renewal.Read),
	// each sent with its timeout keys' prefix.
	reads bool
}

// copies is how a renewed lock is given back to the backends that lost it
// (afterGrant): a lock held for long, renewed all along, then keeps every
// backend through restarts one at a time.
func (r renewScript) copies() copyKind {
	if r.reads {
		return copyRead
	}
	if r.fields {
		return copyHash
	}
	return copyValue
}

// renewAnswer is one backend's answer for a batch of renewals.
type renewAnswer struct {
	// renewed holds one byte per lock, '1' renewed, '0' not.
	renewed string
	// counts are hash locks' hold counts where renewed (Renewal.Hash).
	counts []int64
	// fences are the fencing tokens that renewed locks carry, where any
	// does (Renew, with fencing).
	fences []int64
}

// renewBatch renews the locks at the positions batch with one script call
// per backend, and writes their outcomes to out at the same positions.
func (e *Engine) renewBatch(ctx context.Context, ttl time.Duration, locks []Held, batch []int, out []Renewed, r renewScript) {
	// A renewal that ran beside a rollback of the same lock could be
	// granted on backends the rollback then deletes it from.
	sent := make([]int, 0, len(batch))
	for _, i := range batch {
		if err := e.rollbacks.wait(ctx, []string{locks[i].Key}, locks[i].Token); err != nil {
			out[i].Err = errors.Join(ErrNoQuorum, err)
			continue
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return
	}
	keys := make([]string, len(sent))
	args := make([]any, 1, 1+len(sent)+1) // room for the set, which checkedCommand appends
	args[0] = ttl.Milliseconds()
	for j, i := range sent {
		keys[j] = locks[i].Key
		args = append(args, locks[i].Token)
		if r.reads {
			args = append(args, locks[i].Prefix)
		}
	}
	// Each lock's send mark, read before the renewal is queued: its
	// release, queued after, stops the top-up that gives the lock back to
	// a backend that lost it. The renewal itself ends no lock (a refused
	// one is rolled back apart), so it leaves the keys' top-ups running.
	marks := make([]uint64, len(keys))
	for j, key := range keys {
		marks[j] = e.sendMark(key)
	}
	f := fanoutKeeping(e, e.checkedCommand(r.script, keys, args...), r.decode(len(sent)))

	// Every vote is waited for, which is simpler than deciding each lock
	// as early as lockOp does; a lock's validity still counts only to its
	// quorum-th yes, so each vote's arrival is kept.
	total := len(e.nodes)
	votes := make([]vote[renewAnswer], 0, total)
	var failures []*NodeError
	for len(votes) < total {
		v, ok := f.next(ctx)
		if !ok {
			break
		}
		votes = append(votes, v)
		if v.err != nil {
			failures = append(failures, v.err.(*NodeError))
		}
	}
	// Every undecided lock's error names the same failures; clipped, an
	// append to one's cannot write into another's.
	failures = slices.Clip(failures)

	var refused []int // positions in sent
	// lock is one lock's votes, for afterGrant, which keeps none of them.
	lock := make([]vote[ack], len(votes))
	for j, i := range sent {
		t := tally{total: total, quorum: e.quorum, failures: failures}
		for _, v := range votes {
			switch {
			case v.err != nil:
			case v.val.renewed[j] == '1':
				if t.yes++; t.yes == t.quorum {
					t.quorumAt = v.at
				}
			default:
				t.no++
			}
		}
		if t.succeeded() {
			if validity := e.validity(ttl, t.quorumAt.Sub(f.start)); validity > 0 {
				out[i].Validity = validity
				for k, v := range votes {
					lock[k] = lockVote(v, j)
				}
				e.afterGrant(grant{copies: r.copies(), key: locks[i].Key, token: locks[i].Token, prefix: locks[i].Prefix, mark: marks[j], deadline: t.quorumAt.Add(validity)},
					lock, nil, 0)
				continue
			}
			// Too slow: the lock may already be expiring.
			out[i].Err = ErrNotHeld
			refused = append(refused, j)
			continue
		}
		err := t.err(ErrNotHeld)
		if !errors.Is(err, ErrNoQuorum) {
			refused = append(refused, j)
		}
		out[i].Err = cut(ctx, err)
	}
	if len(refused) > 0 && !r.fields {
		e.rollBackRenewals(ctx, ttl, locks, sent, refused, votes, f, total-len(votes))
	}
}

// decodeRenewed reads lua/renew_each.lua's answer for a batch of n locks:
// per lock, '1' renewed, '0' not, or 'f' and 19 digits, renewed and
// carrying that fencing token.
func decodeRenewed(n int) func(*node, backend.Reply) (renewAnswer, error) {
	return func(_ *node, r backend.Reply) (renewAnswer, error) {
		answer, err := r.Bulk()
		if err != nil {
			return renewAnswer{}, err
		}
		if len(answer) == n && strings.Trim(answer, "01") == "" {
			return renewAnswer{renewed: answer}, nil // no fencing tokens: the usual answer, kept as it came
		}
		bad := fmt.Errorf("renewal of %d locks answered %q", n, answer)
		renewed := make([]byte, 0, n)
		fences := make([]int64, n)
		for rest := answer; rest != ""; {
			if len(renewed) == n {
				return renewAnswer{}, bad
			}
			switch rest[0] {
			case '0', '1':
				renewed, rest = append(renewed, rest[0]), rest[1:]
				continue
			case 'f':
				if len(rest) < 1+fenceWidth {
					return renewAnswer{}, bad
				}
				fence, err := strconv.ParseInt(rest[1:1+fenceWidth], 10, 64)
				if err != nil {
					return renewAnswer{}, bad
				}
				fences[len(renewed)] = fence
				renewed, rest = append(renewed, '1'), rest[1+fenceWidth:]
			default:
				return renewAnswer{}, bad
			}
		}
		if len(renewed) != n {
			return renewAnswer{}, bad
		}
		return renewAnswer{renewed: string(renewed), fences: fences}, nil
	}
}

// decodeRenewedCounts reads lua/hash_renew_each.lua's answer for a batch
// of n hash locks: each one's hold count where renewed, 0 where not, or
// {count, fencing token} where the renewed lock carries a token.
func decodeRenewedCounts(n int) func(*node, backend.Reply) (renewAnswer, error) {
	return func(_ *node, r backend.Reply) (renewAnswer, error) {
		a, err := r.Array()
		if err == nil && len(a) != n {
			err = fmt.Errorf("renewal of %d locks answered %d counts", n, len(a))
		}
		if err != nil {
			return renewAnswer{}, err
		}
		renewed := make([]byte, n)
		counts := make([]int64, n)
		var fences []int64
		for i, c := range a {
			if !c.IsInteger() {
				var fence int64
				if counts[i], fence, err = numberAndFence(c); err != nil {
					return renewAnswer{}, fmt.Errorf("renewal of %d locks: %w", n, err)
				}
				if fences == nil {
					fences = make([]int64, n)
				}
				fences[i] = fence
			} else if counts[i], err = c.Integer(); err != nil || counts[i] < 0 {
				return renewAnswer{}, fmt.Errorf("renewal of %d locks answered a count %v (%v)", n, counts[i], err)
			}
			renewed[i] = '0'
			if counts[i] > 0 {
				renewed[i] = '1'
			}
		}
		return renewAnswer{renewed: string(renewed), counts: counts, fences: fences}, nil
	}
}

// rollBackRenewals undoes the renewals of a batch at the positions refused
// in sent, each as lockOp undoes a refused extension (rollback):
// compare-and-delete wherever the backend renewed the lock or gave no
// clear answer. The backends still pending, whose votes the batch did not
// read, each reply once for the whole batch; their replies are handed to
// every lock's rollback.
func (e *Engine) rollBackRenewals(ctx context.Context, ttl time.Duration, locks []Held, sent, refused []int, votes []vote[renewAnswer], f *flight[renewAnswer], pending int) {
	rests := make([]chan vote[ack], len(refused))
	var wg sync.WaitGroup
	for r, j := range refused {
		l := locks[sent[j]]
		seen := make([]vote[ack], len(votes))
		for k, v := range votes {
			seen[k] = lockVote(v, j)
		}
		op := lockOp{
			keys:  []string{l.Key},
			token: l.Token,
			ttl:   ttl,
			undo:  func(ctx context.Context, n *node, _ ack) { n.release(ctx, l.Key, l.Token) },
		}
		if pending > 0 {
			rests[r] = make(chan vote[ack], pending)
		}
		wg.Go(func() { e.rollback(ctx, op, seen, rests[r], pending, false) })
	}
	if pending > 0 {
		go func() {
			for range pending {
				v := <-f.votes
				for r, j := range refused {
					rests[r] <- lockVote(v, j)
				}
			}
		}()
	}
	wg.Wait()
}

// lockVote is the vote of one backend on the lock at position j of a
// batch. A backend that answered but does not count (in quarantine) keeps
// its answer, for a top-up (missedInQuarantine).
func lockVote(v vote[renewAnswer], j int) vote[ack] {
	out := vote[ack]{node: v.node, err: v.err}
	if len(v.val.renewed) > j {
		out.val.yes = v.val.renewed[j] == '1'
		if v.val.counts != nil {
			out.val.count = v.val.counts[j]
		}
		if v.val.fences != nil {
			out.val.fence = v.val.fences[j]
		}
	}
	return out
}
