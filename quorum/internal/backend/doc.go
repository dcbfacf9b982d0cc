// Package backend talks to one Redis server: a pipelined connection that
// dials when needed and greets each new connection, the RESP encoding of
// commands and decoding of replies, and what the network says of a
// failure.
//
// It knows nothing of locks, quorums or Redlock. Scripts are opaque bodies
// run by SHA1; the greeting reports facts (run_id, uptime, version, the
// commands the server knows, whether the scripts loaded) and lets the
// caller's Admit judge them; a request's failure is only classified
// (timeout, refused, closed, never sent), not weighed.
//
// Files: pipe.go (Pipe: one shared connection, requests and replies
// matched in order), dial.go (URL, TLS, dialling), greet.go (AUTH, SELECT,
// INFO server, COMMAND INFO and SCRIPT LOAD), wire.go (Command, Script,
// Reply), classify.go (failures).
//
// A Pipe, a Command and a Script are safe for concurrent use; a Reply is a
// value.
package backend
