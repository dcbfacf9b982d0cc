package main

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// embeddedBackends is how many in-memory backends lockproxy runs on when no
// backends are configured: enough to show quorum at work, not to survive
// anything, since they all live and die with this process.
const embeddedBackends = 5

// startEmbedded starts the in-memory backends and returns their URLs and a
// function that stops them.
func startEmbedded() ([]string, func(), error) {
	var servers []*miniredis.Miniredis
	stop := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	var urls []string
	for range embeddedBackends {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("embedded backend: %w", err)
		}
		// Locks must expire in real time, as on a real Redis.
		s.ClockTTL(true)
		servers = append(servers, s)
		urls = append(urls, "redis://"+s.Addr())
	}
	return urls, stop, nil
}
