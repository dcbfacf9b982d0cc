// Package backend talks to Redis servers, one Pipe per server: a
// pipelined connection that dials when a request needs it and greets each
// new connection (AUTH, SELECT, INFO server, COMMAND INFO, SCRIPT LOAD)
// before any request is written on it; the RESP encoding of commands and
// decoding of replies; and what the network says of a failure.
//
// It knows nothing of locks, quorums or Redlock, and imports nothing of
// lockproxy's. Scripts are opaque bodies run by their SHA1. The greeting
// reports facts (run_id, uptime, version, the commands the server knows,
// whether the scripts loaded) and leaves the verdict to the caller's
// Config.Admit. A failure is classified (timeout, refused, closed, never
// sent, credentials refused, another protocol than Redis's), never weighed, and nothing is ever retried but a script the
// server did not have (NOSCRIPT, which ran nothing).
//
// Files: pipe.go (Pipe, Request, Completer), dial.go (the URL, TLS and
// dialling), greet.go (the greeting and Greeting), wire.go (Command,
// Script, Reply, and reading replies), classify.go (failures),
// subscribe.go (Subscriber: one subscribed-mode connection per server,
// dialled again when lost, with every channel still wanted).
//
// A Pipe is safe for concurrent use, and so are Commands and Scripts,
// which never change once built; a Reply is a value.
package backend
