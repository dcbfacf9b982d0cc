// Package admin serves lockproxy's metrics address, the pages an operator
// and an orchestrator read: Handler routes them.
//
// health.go is /healthz and /readyz (whether a quorum of backends
// answers); status.go the status page at / (status.html, rendered on the
// server), with its note on a start's wait, and the sampler of the
// operation rates it shows; locks.go /locks, a page of the lock listing as
// JSON, and the page's sample of held and undecided locks; metrics.go
// Metrics, the Prometheus collector of the proxy's and the engine's state,
// which main registers on the default registry that /metrics serves.
package admin
