// Package test holds lockproxy's end-to-end tests: they build the real
// binary, start it in front of real redis-server backends, and drive it with
// real clients (go-redis v9 and redis-cli).
package test
