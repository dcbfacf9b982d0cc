package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
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
	// cost 10), which is the point of bcrypt.
	PasswordBcrypt string
	// KeyPrefix is put in front of every key the user's commands name
	// before it reaches the Locker, so that users with distinct prefixes
	// cannot touch each other's locks. Replies are unchanged. New fails
	// when two users' prefixes nest ("t:" and "t:x:"); users may share one,
	// and a user without one sees every key. Default: none.
	KeyPrefix string
}

// defaultUser is Redis's name for the user of the one-argument AUTH.
const defaultUser = "default"

// account is a user as the server checks it.
type account struct {
	name   string
	sha256 []byte // the password's SHA-256; nil with bcrypt or nopass
	bcrypt []byte // the password's bcrypt hash; nil with sha256 or nopass
	nopass bool   // any password is accepted (Redis's default user when no password is set)
	locks  *keyspace
}

// users is every account the server knows, by name.
type users struct {
	byName map[string]*account
	// anonymous is the account a new connection starts as: the default
	// user when it needs no password, nil when AUTH is required.
	anonymous *account
	// decoy is a bcrypt hash compared when AUTH names an unknown user and
	// some user has a bcrypt password, so that the time an AUTH takes
	// does not tell which user names exist.
	decoy []byte
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
		u.byName[defaultUser] = &account{name: defaultUser, sha256: sum[:], locks: space("")}
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
		if a.bcrypt != nil && u.decoy == nil {
			u.decoy = a.bcrypt
		}
	}
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

// CheckUsers returns the error New would return for password and users,
// so that a configuration can be checked before it is used.
func CheckUsers(password string, users []User) error {
	_, err := newUsers(Config{Password: password, Users: users}, func(string) *keyspace { return nil })
	return err
}

func newAccount(user User, space func(string) *keyspace) (*account, error) {
	a := &account{name: user.Name, locks: space(user.KeyPrefix)}
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
		a.sha256 = sum
	default:
		if _, err := bcrypt.Cost([]byte(user.PasswordBcrypt)); err != nil {
			return nil, fmt.Errorf("the bcrypt password hash is not valid: %w", err)
		}
		a.bcrypt = []byte(user.PasswordBcrypt)
	}
	return a, nil
}

// authenticate returns the account name and pass open, as Redis checks
// AUTH: legacy is the one-argument AUTH pass, which is refused as a likely
// misconfiguration when the default user needs no password. Every failure
// is the same WRONGPASS, whether the user is unknown or the password wrong.
func (u *users) authenticate(name string, pass []byte, legacy bool) (*account, error) {
	a := u.byName[name]
	switch {
	case a == nil:
		if u.decoy != nil {
			u.compare(u.decoy, pass)
		}
		return nil, errWrongPass
	case a.nopass && legacy:
		return nil, errNoPassword
	case a.nopass:
		return a, nil
	case a.bcrypt != nil:
		if u.compare(a.bcrypt, pass) != nil {
			return nil, errWrongPass
		}
		return a, nil
	}
	// Hashing first makes the comparison constant-time in the length too.
	got := sha256.Sum256(pass)
	if subtle.ConstantTimeCompare(got[:], a.sha256) != 1 {
		return nil, errWrongPass
	}
	return a, nil
}
