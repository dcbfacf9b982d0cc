package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// What the network says of a failure. Each is independent of the others;
// a caller that names failures asks them in the order it prefers.

// IsTimeout reports whether err is a timeout: a deadline of the caller's
// or of the connection passed.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// IsRefused reports whether err is a refused dial: nothing listens there.
func IsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// IsClosed reports whether err is a connection closed or reset, by either
// end.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// IsServerError reports whether err is the server's own error reply: it
// answered, refusing the command (unknown, or denied by its ACL).
func IsServerError(err error) bool {
	var se serverError
	return errors.As(err, &se)
}

// NotRedisError is a greeting answered in another protocol than Redis's:
// an HTTP server, SSH, a database of another kind at the address.
type NotRedisError struct {
	Addr  string
	First string // the first bytes it sent, up to the first CRLF
	Err   error  // what the reply parser made of them
}

func (e *NotRedisError) Error() string {
	return fmt.Sprintf("backend %s did not answer as Redis (its first bytes: %q): is this a Redis port?", e.Addr, e.First)
}

func (e *NotRedisError) Unwrap() error { return e.Err }

// AuthError is a server's refusal of the greeting's credentials: a wrong
// user or password (WRONGPASS), none given where it requires one (NOAUTH),
// or one given where it has none.
type AuthError struct {
	Addr     string
	User     string // as the URL names it; "" when it names none
	Password bool   // whether the URL gives a password
	Reply    string // the server's error reply
}

func (e *AuthError) Error() string {
	switch {
	case !e.Password:
		return fmt.Sprintf("authentication failed on backend %s: it requires a password and its URL gives none (%s); give one as redis://user:password@host:port", e.Addr, e.Reply)
	case e.User == "":
		return fmt.Sprintf("authentication failed on backend %s as user \"default\" (its URL names no user): check the password in its URL (%s)", e.Addr, e.Reply)
	}
	return fmt.Sprintf("authentication failed on backend %s as user %q: check the user and password in its URL (%s)", e.Addr, e.User, e.Reply)
}
