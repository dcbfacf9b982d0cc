// Package redistest starts real redis-server processes for tests, the way
// net/http/httptest starts HTTP servers: each Server listens on its own free
// 127.0.0.1 port, keeps no data on disk, and is killed when the test ends.
//
// Beyond starting servers it injects the faults a Redlock deployment must
// survive: Kill (a lost node), Pause and Resume (a hung node, SIGSTOP and
// SIGCONT) and Restart (a node that comes back empty, having forgotten every
// lock it held). StartWith's ClockRate (libfaketime) runs a server's clock
// fast or slow, as a host whose clock is off would; its Stepped puts the
// servers' clocks on a SteppedClock, which moves them only when the test
// advances it, together with the clockwork.Clock it gives the code under
// test: a wait of a minute then takes one step.
//
// It knows nothing about locks, quorums or the proxy. It needs the
// redis-server binary in PATH and fails the test when it is missing rather
// than skipping it: a skipped safety test is a hidden failure.
//
// All methods of a Server are safe for concurrent use, so a nemesis goroutine
// may Kill, Pause, Resume and Restart while the test goroutine runs clients.
// Start and StartN call t.Fatalf and must run on the test goroutine.
//
// Where things are: redistest.go (Server, Start, StartWith, the faults and
// the clock rate; signals_unix.go and signals_other.go, Pause's and
// Resume's signals), stepped.go (SteppedClock, and the libfaketime files it
// rewrites at each step), eventually.go (Eventually, the poll that stands in
// for a sleep wherever a test waits for a condition), serve.go (Serve, a
// server of a protocol that is not Redis).
package redistest
