package quorum

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run on each backend. Keeping them in .lua files lets them be
// read and tested as Lua; go-redis sends EVALSHA and falls back to EVAL on
// NOSCRIPT, which a restarted backend answers.
var (
	acquireScript         = luaScript("acquire")
	releaseScript         = luaScript("release")
	releaseStampedScript  = luaScript("release_stamped")
	extendScript          = luaScript("extend")
	readScript            = luaScript("read")
	acquireAllScript      = luaScript("acquire_all")
	releaseAllScript      = luaScript("release_all")
	extendAllScript       = luaScript("extend_all")
	extendByScript        = luaScript("extend_by")
	extendOrAcquireScript = luaScript("extend_or_acquire")
	acquireOrRenewScript  = luaScript("acquire_or_renew")
)

//go:embed lua/*.lua
var luaFiles embed.FS

// luaScript loads lua/name.lua; a missing file is a build mistake, caught
// when the package loads.
func luaScript(name string) *redis.Script {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(src))
}
