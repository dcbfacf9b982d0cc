// Package quorum implements the Redlock algorithm over N independent Redis
// masters: a lock is held when a majority (N/2+1) of the masters that count
// accepted it and the time spent acquiring it left positive validity.
//
// It knows nothing about RESP or the proxy. Callers pass keys, tokens and
// TTLs and get a Result or one of the sentinel errors in errors.go.
// An Engine keeps no lock state (any number of engines may share the same
// backends); it only remembers which rollbacks it is still running, so that
// a retry with the same token waits for them. It is safe for concurrent use.
package quorum
