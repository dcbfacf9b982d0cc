// Package testcerts makes a throwaway certificate authority for tests: a
// CA, a server certificate for 127.0.0.1 and localhost, and a client
// certificate, written as PEM files to t.TempDir(). No private key is ever
// checked in; each test gets fresh ones.
package testcerts
