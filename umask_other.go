//go:build !unix

package main

// umask does nothing where there is no umask (Windows): a Unix socket
// there gets the access its directory gives, whatever unix_socket_perm says.
func umask(mask int) int { return 0 }
