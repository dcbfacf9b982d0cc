package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// User is a named account clients authenticate as with AUTH user pass or
// HELLO ... AUTH user pass. Passwords are kept only as hashes.
type User struct {
	// Name is what AUTH names. The user "default" is the one of the
	// one-argument AUTH pass, in place of Config.Password. Required.
	Name string
	// PasswordSHA256 is the hex SHA-256 of the password, as Redis ACL's
	// "#<hash>" (echo -n pass | sha256sum). Exactly one of PasswordSHA256
	// and PasswordBcrypt is required.
	PasswordSHA256 string
	// PasswordBcrypt is a bcrypt hash of the password ($2a$, $2b$, $2y$).
	// Each AUTH then costs a bcrypt comparison (tens of milliseconds at
	// cost 10), which is the point of bcrypt; every AUTH, whatever user it
	// names, costs one at the highest cost configured.
	PasswordBcrypt string
	// KeyPrefix is put in front of every key the user's commands name
	// before it reaches the Locker, so that users with distinct prefixes
	// cannot touch each other's locks. Replies are unchanged. New fails
	// when two users' prefixes nest ("t:" and "t:x:"); users may share one,
	// and a user without one sees every key. Default: none.
	KeyPrefix string
	// Session makes every SET NX, SETNX and LOCK.ACQUIRE lock of the user
	// session-bound (session.go), whatever TTL it asks for. Default: false.
	Session bool
}

// defaultUser is Redis's name for the user of the one-argument AUTH.
const defaultUser = "default"

// account is a user as the server checks it.
type account struct {
	name   string
	nopass bool // any password is accepted (Redis's default user when no password is set)
	check  check
	locks  *keyspace
	// session: the user's locks are session-bound (User.Session).
	session bool
}

// check is the hash work that verifies one password: its SHA-256 compared
// in constant time with sha256, then a bcrypt comparison with each of
// bcrypt. Only the SHA-256 and, when own is set, the first bcrypt hash can
// admit; the other hashes are compared for their cost alone. users.equalize
// makes every check, an unknown user's included, the same work, so that the
// time an AUTH takes tells neither whether a user exists nor how its
// password is hashed.
type check struct {
	sha256 []byte
	bcrypt [][]byte
	own    bool
}

// users is every account the server knows, by name.
type users struct {
	byName map[string]*account
	// anonymous is the account a new connection starts as: the default
	// user when it needs no password, nil when AUTH is required.
	anonymous *account
	// unknown is the check of a name no account has.
	unknown check
	// compare is bcrypt.CompareHashAndPassword; tests count the work.
	compare func(hash, pass []byte) error
}

// newUsers builds the accounts of cfg. Without Password or a user named
// "default", the default user is "nopass" (every connection is
// authenticated) when no other user is configured, and off (every
// connection must AUTH as a named user) when some are.
func newUsers(cfg Config, space func(prefix string) *keyspace) (*users, error) {
	u := &users{byName: map[string]*account{}, compare: bcrypt.CompareHashAndPassword}
	if cfg.Password != "" {
		sum := sha256.Sum256([]byte(cfg.Password))
		u.byName[defaultUser] = &account{name: defaultUser, check: check{sha256: sum[:]}, locks: space("")}
	}
	for i, user := range cfg.Users {
		a, err := newAccount(user, space)
		if err != nil {
			return nil, fmt.Errorf("users: entry %d (%q): %w", i+1, user.Name, err)
		}
		if u.byName[a.name] != nil {
			if a.name == defaultUser && cfg.Password != "" {
				return nil, errors.New(`users: the user "default" and password are both configured; keep one`)
			}
			return nil, fmt.Errorf("users: user %q is configured twice", a.name)
		}
		u.byName[a.name] = a
	}
	u.equalize()
	if err := checkPrefixes(cfg.Users); err != nil {
		return nil, err
	}
	if len(u.byName) == 0 {
		u.anonymous = &account{name: defaultUser, nopass: true, locks: space("")}
		u.byName[defaultUser] = u.anonymous
	}
	return u, nil
}

// checkPrefixes refuses key prefixes that nest: with "t:" and "t:x:", the
// first user's key "x:orders" is the second's "orders". Users that share one
// prefix share one keyspace on purpose (two credentials of one tenant, say),
// and a user without a prefix sees every key, as an administrator's account
// does (Redis ACL's ~* beside ~app1:*); neither looks like a separation that
// is not one, so both are accepted.
func checkPrefixes(users []User) error {
	for i, a := range users {
		for _, b := range users[i+1:] {
			if a.KeyPrefix == "" || b.KeyPrefix == "" || a.KeyPrefix == b.KeyPrefix {
				continue
			}
			outer, inner := a, b
			if len(outer.KeyPrefix) > len(inner.KeyPrefix) {
				outer, inner = inner, outer
			}
			if strings.HasPrefix(inner.KeyPrefix, outer.KeyPrefix) {
				return fmt.Errorf("users: key prefixes overlap: user %q (key prefix %q) can reach every lock of user %q (key prefix %q)",
					outer.Name, outer.KeyPrefix, inner.Name, inner.KeyPrefix)
			}
		}
	}
	return nil
}

// keepScripts gives each account the script cache of the account of old
// with its name and key prefix: a reload that leaves a user as it was must
// not make its clients load their scripts again. The cache is shared with
// the old account, which the connections authenticated before the reload
// still use; both are the same user's.
func (u *users) keepScripts(old *users) {
	for name, a := range u.byName {
		if o := old.byName[name]; o != nil && o.locks != nil && a.locks != nil && o.locks.prefix == a.locks.prefix {
			a.locks.scripts = o.locks.scripts
		}
	}
}

// CheckUsers returns the error New would return for password and users,
// so that a configuration can be checked before it is used.
func CheckUsers(password string, users []User) error {
	_, err := newUsers(Config{Password: password, Users: users}, func(string) *keyspace { return nil })
	return err
}

func newAccount(user User, space func(string) *keyspace) (*account, error) {
	a := &account{name: user.Name, locks: space(user.KeyPrefix), session: user.Session}
	switch {
	case user.Name == "":
		return nil, errors.New("no name")
	case (user.PasswordSHA256 == "") == (user.PasswordBcrypt == ""):
		return nil, errors.New("needs exactly one of a SHA-256 and a bcrypt password hash")
	case user.PasswordSHA256 != "":
		sum, err := hex.DecodeString(user.PasswordSHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, errors.New("the SHA-256 password hash is not 64 hex digits")
		}
		a.check.sha256 = sum
	default:
		if _, err := bcrypt.Cost([]byte(user.PasswordBcrypt)); err != nil {
			return nil, fmt.Errorf("the bcrypt password hash is not valid: %w", err)
		}
		a.check = check{bcrypt: [][]byte{[]byte(user.PasswordBcrypt)}, own: true}
	}
	return a, nil
}

// equalize pads every check to the work of the dearest one. A SHA-256 is
// computed for every AUTH; an account without one compares against a random
// digest, which no password has. When some password is a bcrypt hash, every
// check also costs 2^max rounds of bcrypt, max being the highest configured
// cost: an unknown user and a SHA-256 user compare with the dearest hash
// (its result ignored), and a user whose hash costs c < max then compares
// with hashes of costs c, c+1, ..., max-1, which add 2^max - 2^c rounds.
// Those are the user's own hash with its cost changed: no password matches
// them (salt and digest no longer belong together), and each costs what a
// real hash of that cost does.
func (u *users) equalize() {
	noPassword := make([]byte, sha256.Size)
	rand.Read(noPassword)
	var dearest []byte
	top := 0
	for _, a := range u.byName {
		if a.check.sha256 == nil {
			a.check.sha256 = noPassword
		}
		if a.check.own {
			if cost, _ := bcrypt.Cost(a.check.bcrypt[0]); cost > top {
				dearest, top = a.check.bcrypt[0], cost
			}
		}
	}
	u.unknown = check{sha256: noPassword}
	if dearest == nil {
		return
	}
	u.unknown.bcrypt = [][]byte{dearest}
	for _, a := range u.byName {
		switch {
		case a.nopass:
		case !a.check.own:
			a.check.bcrypt = [][]byte{dearest}
		default:
			own := a.check.bcrypt[0]
			cost, _ := bcrypt.Cost(own)
			for ; cost < top; cost++ {
				a.check.bcrypt = append(a.check.bcrypt, withCost(own, cost))
			}
		}
	}
}

// withCost returns a copy of the bcrypt hash h ("$2a$10$" and 53 characters
// of salt and digest) with its cost replaced.
func withCost(h []byte, cost int) []byte {
	at := bytes.IndexByte(h[1:], '$') + 2 // the cost's two digits follow the version's '$'
	out := slices.Clone(h)
	copy(out[at:at+2], fmt.Sprintf("%02d", cost))
	return out
}

// authenticate returns the account name and pass open, as Redis checks
// AUTH: legacy is the one-argument AUTH pass, which is refused as a likely
// misconfiguration when the default user needs no password. Every failure
// is the same WRONGPASS, whether the user is unknown or the password wrong,
// and every answer but a nopass one costs the same hash work (check).
func (u *users) authenticate(name string, pass []byte, legacy bool) (*account, error) {
	a := u.byName[name]
	c := u.unknown
	switch {
	case a != nil && a.nopass && legacy:
		return nil, errNoPassword
	case a != nil && a.nopass:
		return a, nil // no password is configured: there is nothing to hide
	case a != nil:
		c = a.check
	}
	// Hashing first makes the comparison constant-time in the length too.
	sum := sha256.Sum256(pass)
	ok := subtle.ConstantTimeCompare(sum[:], c.sha256) == 1
	for i, h := range c.bcrypt {
		if u.compare(h, pass) == nil && i == 0 && c.own {
			ok = true
		}
	}
	if !ok || a == nil {
		return nil, errWrongPass
	}
	return a, nil
}
