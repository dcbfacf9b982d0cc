package quorum

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run on each backend. Keeping them in .lua files lets them be
// read and tested as Lua; go-redis sends EVALSHA and falls back to EVAL on
// NOSCRIPT, which a restarted backend answers.
var (
	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed lua/read.lua
	readLua    string
	readScript = redis.NewScript(readLua)
)
