// Package tempredis stands in for github.com/stvp/tempredis in the copy of
// redsync's test suite that make peers runs (test/peers/run.sh replaces
// the module with this directory). Where tempredis starts a redis-server
// of its own on the port its Config names, with a Unix socket beside it,
// Start here names the socket of the server under test that run.sh
// already started on that port: one plain redis-server, or one lockproxy
// instance. Nothing else of the suite changes.
package tempredis

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Config is tempredis's: redis-server settings. Only "port" is read.
type Config map[string]string

// PeerBasePort is the first of the consecutive ports run.sh serves on
// (PEER_REDSYNC_BASE_PORT); run.sh puts it in the suite where it says
// 51200, the first port of redsync's own servers.
var PeerBasePort = basePort()

func basePort() int {
	p, err := strconv.Atoi(os.Getenv("PEER_REDSYNC_BASE_PORT"))
	if err != nil {
		panic("tempredis stand-in: PEER_REDSYNC_BASE_PORT: " + err.Error())
	}
	return p
}

// Server is a server run.sh started: its Unix socket is
// $PEER_REDSYNC_SOCKETS/PORT.sock.
type Server struct {
	socket string
}

// Start names the server on config's port; a Config without one (the
// suite's script-hash test) gets the first server.
func Start(config Config) (*Server, error) {
	port := config["port"]
	if port == "" {
		port = strconv.Itoa(PeerBasePort)
	}
	socket := filepath.Join(os.Getenv("PEER_REDSYNC_SOCKETS"), port+".sock")
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("tempredis stand-in: no server on port %s: %w", port, err)
	}
	return &Server{socket: socket}, nil
}

// Socket is the path of the server's Unix socket.
func (s *Server) Socket() string { return s.socket }

// Term leaves the server running: run.sh stops it.
func (s *Server) Term() error { return nil }
