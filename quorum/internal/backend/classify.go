package backend

import (
	"context"
	"errors"
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
