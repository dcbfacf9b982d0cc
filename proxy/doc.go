// Package proxy is lockproxy's RESP front end: it speaks the Redis protocol
// (RESP2, and RESP3 to connections that ask for it with HELLO 3) to unchanged
// Redis clients, parses their lock commands and scripts, makes one call on a
// Locker per command, and encodes the answer as Redis would.
//
// It knows nothing of Redlock arithmetic: quorum sizes, validity and drift
// belong to the Locker (package quorum). A Server is safe for concurrent use;
// it serves each client connection in a goroutine of its own (client.go),
// with redcon's Conn interface, parser and reply encoders.
package proxy
