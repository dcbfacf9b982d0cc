// The stand-in for github.com/stvp/tempredis that make peers puts in
// redsync's test suite (go mod edit -replace): see tempredis.go.
module github.com/stvp/tempredis

go 1.21
